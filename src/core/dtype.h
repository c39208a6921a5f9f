#pragma once
// Element types (DType, strata/dtype.h) with their sizes and the scalar conversions the CPU
// kernels use. bf16 and fp16 are stored as raw 16-bit patterns (uint16_t) so host code needs no
// compiler extension; conversions to fp32 are exact, conversions from fp32 round to nearest even.
//
// fp8 (OCP 8-bit floating point, the formats of NVIDIA's __nv_fp8_e4m3 / __nv_fp8_e5m2) is
// stored as raw uint8_t codes:
//   e4m3 ("E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is
//                    NaN; largest finite +-448; smallest subnormal 2^-9.
//   e5m2:            1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like (inf 0x7C/0xFC,
//                    NaN exponent 31 with a non-zero mantissa); largest finite +-57344; smallest
//                    subnormal 2^-16.
// fp8 -> fp32 is exact (a 256-entry table). fp32 -> fp8 rounds to nearest even and saturates:
// any value beyond the largest finite (infinities included) becomes +-max, like CUDA's
// __NV_SATFINITE; NaN becomes the sign-preserving NaN code 0x7F / 0xFF.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/check.h"
#include "strata/dtype.h"

namespace strata {

// Bytes per element. Aborts for I4 (half a byte: use dtype_bits), so no size computation can
// silently treat packed codes as whole bytes.
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kI4:
      STRATA_CHECK(false, "dtype_size(I4): two codes per byte; use dtype_bits");
      return 0;
    case DType::kF64: return 8;
    case DType::kI64: return 8;
    case DType::kF32: return 4;
    case DType::kI32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kF8E5M2: return 1;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

// Bits per element: 8 x dtype_size, or 4 for I4.
constexpr int64_t dtype_bits(DType t) { return t == DType::kI4 ? 4 : 8 * dtype_size(t); }

// Parses the safetensors spelling; nullopt for an unknown name.
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, keep the sign
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// fp16 bit pattern -> fp32, exact. Branch-free (the cases are selected with masks) so that the
// CPU kernels' conversion loops vectorize: normal numbers move the exponent from bias 15 to bias
// 127, subnormals are mantissa * 2^-24 (exact in fp32), inf/NaN keep their payload.
inline float f16_to_f32(uint16_t h) {
  const auto bits = static_cast<uint32_t>(h);
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  const uint32_t normal = ((bits & 0x7fffu) << 13) + (112u << 23);
  const uint32_t special = 0x7f800000u | (mantissa << 13);
  const float subnormal_value = static_cast<float>(mantissa) * 0x1p-24f;
  uint32_t subnormal;
  std::memcpy(&subnormal, &subnormal_value, sizeof(subnormal));
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exponent == 0);
  const uint32_t is_special = 0u - static_cast<uint32_t>(exponent == 0x1f);
  const uint32_t magnitude =
      (subnormal & is_subnormal) | (special & is_special) | (normal & ~(is_subnormal | is_special));
  const uint32_t out = sign | magnitude;
  float f;
  std::memcpy(&f, &out, sizeof(f));
  return f;
}

uint16_t f32_to_f16(float f);

// The 256 fp32 values of the fp8 codes (index = code), exact; NaN codes give a quiet NaN.
const float* fp8_e4m3_table();
const float* fp8_e5m2_table();
inline float fp8_e4m3_to_f32(uint8_t code) { return fp8_e4m3_table()[code]; }
inline float fp8_e5m2_to_f32(uint8_t code) { return fp8_e5m2_table()[code]; }
uint8_t f32_to_fp8_e4m3(float f);
uint8_t f32_to_fp8_e5m2(float f);
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

}  // namespace strata

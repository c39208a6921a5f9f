#pragma once
// Element types of tensors and KV caches, with their sizes and the scalar conversions the CPU
// kernels use. bf16 and fp16 are stored as raw 16-bit patterns (uint16_t) so host code needs no
// compiler extension; conversions to fp32 are exact, conversions from fp32 round to nearest even.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
};

// Bytes per element.
constexpr int64_t dtype_size(DType t) {
  switch (t) {
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

// The safetensors spelling: "F32", "BF16", ...
std::string_view dtype_name(DType t);
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

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace strata

#pragma once
// Q over 8-bit caches (docs/kernels.md, "FP8, INT8 and INT4 prefill"). The FP8 and INT8 prefill
// multiply Q K^T on 8-bit tensor cores, so they round each (query token, head) row of Q to 8-bit
// codes under a scale per row that brings its largest |q| within the codes' range (e4m3's 448
// over FP8 caches, the smallest power of two that does; 127 over INT8, amax / 127), and fold the
// scale into the row's scores. The decode kernel rounds Q to the same codes and multiplies the
// fp16 values code x scale (FP8: exact for a power of two) or the codes, the row's scale then
// multiplying its scores (INT8), so that a token's attention does not depend on which kernel ran
// its row. query_codes.h holds the host's copy of the rounding (the tests' and benchmarks'
// references). Internal (.cuh).

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/kv_codes.cuh"
#include "kernels/cuda/mma.cuh"

namespace strata::cuda::detail {

// Whether attention over a kKv cache rounds Q to codes: e4m3 codes over FP8 caches, int8 over
// INT8.
template <DType kKv>
inline constexpr bool kRoundsQuery =
    kKv == DType::kF8E4M3 || kKv == DType::kF8E5M2 || kKv == DType::kI8;
template <DType kKv>
inline constexpr float kQueryCodeMax = kKv == DType::kI8 ? 127.0f : kFp8E4M3Max;

// A query row's rounding: codes = q * inv, values = code * scale (both 0 for a row of zeros).
struct QueryScale {
  float inv = 0.0f;
  float scale = 0.0f;
};

// From the largest |q| of the whole row. e4m3 codes: scale = 1 / inv, a power of two (a
// floating code gains nothing from a finer scale). int8 codes: scale = amax / 127 and inv =
// 127 / amax, the whole code range (a power of two would leave up to half of it unused).
template <DType kKv>
__device__ __forceinline__ QueryScale query_scale_of(float row_amax) {
  QueryScale s;
  if constexpr (kKv == DType::kI8) {
    if (row_amax > 0.0f) {
      s.scale = row_amax / 127.0f;
      s.inv = 127.0f / row_amax;
    }
    return s;
  }
  const float need = row_amax / kQueryCodeMax<kKv>;
  if (need > 0.0f) {
    // The smallest power of two >= need: need's exponent, one up if any mantissa bit is set.
    const uint32_t bits = __float_as_uint(need);
    const uint32_t exponent = (bits >> 23) + ((bits & 0x7fffffu) != 0u ? 1u : 0u);
    s.scale = __uint_as_float(exponent << 23);
    s.inv = __uint_as_float((254u - exponent) << 23);
  }
  return s;
}

// From the largest |q| of the row's values in this lane, reduced over the four lanes of a
// fragment row (lanes differing in bits 0 and 1 of the lane index).
template <DType kKv>
__device__ __forceinline__ QueryScale query_scale(float lane_amax) {
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    lane_amax = fmaxf(lane_amax, __shfl_xor_sync(0xffffffffu, lane_amax, off));
  }
  return query_scale_of<kKv>(lane_amax);
}

// The larger |x| of two 16-bit values of kQ.
template <DType kQ>
__device__ __forceinline__ float abs_max2(uint32_t pair) {
  const float2 f = unpack2<kQ>(pair);
  return fmaxf(fabsf(f.x), fabsf(f.y));
}

// One value as an int8 code (round to nearest even, within +-127), in the low byte.
__device__ __forceinline__ uint32_t int8_code(float x) {
  return static_cast<uint32_t>(min(max(__float2int_rn(x), -127), 127)) & 0xffu;
}

// Four values (two pairs of kQ) as four codes of kKv's query rounding, the first in the low
// byte: e4m3 (FP8 caches) or int8 (INT8).
template <DType kKv, DType kQ>
__device__ __forceinline__ uint32_t query_codes4(uint32_t lo, uint32_t hi, float inv) {
  const float2 a = unpack2<kQ>(lo);
  const float2 b = unpack2<kQ>(hi);
  if constexpr (kKv == DType::kI8) {
    return int8_code(a.x * inv) | int8_code(a.y * inv) << 8 | int8_code(b.x * inv) << 16 |
           int8_code(b.y * inv) << 24;
  } else {
    return f32x4_to_e4m3x4(a.x * inv, a.y * inv, b.x * inv, b.y * inv);
  }
}

// Two values of kQ rounded as above, as the fp16 values the decode kernel multiplies: FP8's
// code * scale (exact for a power of two), INT8's codes themselves (exact integers; the row's
// scale multiplies its scores, as in prefill, so both kernels' scores are exact integer sums
// times the same scales).
template <DType kKv, DType kQ>
__device__ __forceinline__ uint32_t query_rounded_f16x2(uint32_t pair, QueryScale s) {
  const uint32_t codes = query_codes4<kKv, kQ>(pair, 0u, s.inv);
  uint32_t lo, hi;
  if constexpr (kKv == DType::kI8) {
    codes4_to_f16x2<DType::kI8>(codes, lo, hi);
    return lo;
  } else {
    codes4_to_f16x2<DType::kF8E4M3>(codes, lo, hi);
    const float2 v = unpack2<DType::kF16>(lo);
    return pack2<DType::kF16>(v.x * s.scale, v.y * s.scale);
  }
}

}  // namespace strata::cuda::detail

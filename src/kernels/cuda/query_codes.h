#pragma once
// The host's copy of how attention over an 8-bit cache rounds a query row (query_codes.cuh): to
// e4m3 codes over FP8 caches, under the smallest power-of-two scale that brings the row's
// largest |q| within 448, and to int8 codes over INT8 under amax / 127. The tests' and
// benchmarks' references multiply by these values.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace strata::cuda {

// Whether attention over a kv_dtype cache rounds Q.
inline bool rounds_query(DType kv_dtype) {
  return kv_dtype == DType::kF8E4M3 || kv_dtype == DType::kF8E5M2 || kv_dtype == DType::kI8;
}

// A power-of-two row scale (0 for a row of zeros): the smallest that brings amax within
// max_code.
inline float query_row_scale(float amax, float max_code) {
  const float need = amax / max_code;
  if (!(need > 0.0f)) return 0.0f;
  int exponent = 0;
  const float mantissa = std::frexp(need, &exponent);  // need = mantissa * 2^exponent, [0.5, 1)
  return std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

// Rounds the row in place as attention over a kv_dtype cache does (unchanged where it does not
// round Q).
template <typename Float>
void round_query_row(std::span<Float> row, DType kv_dtype) {
  if (!rounds_query(kv_dtype)) return;
  const bool int8 = kv_dtype == DType::kI8;
  float amax = 0.0f;
  for (Float x : row) amax = std::max(amax, std::abs(static_cast<float>(x)));
  // INT8: float arithmetic as the kernels do it (codes = q x (127 / amax)).
  const float scale = int8 ? amax / 127.0f : query_row_scale(amax, kFp8E4M3Max);
  if (!(scale > 0.0f)) return;
  const float inv = int8 ? 127.0f / amax : 1.0f / scale;
  for (Float& x : row) {
    const float c = static_cast<float>(x) * inv;
    const float code = int8 ? std::clamp(std::nearbyint(c), -127.0f, 127.0f)
                            : fp8_e4m3_to_f32(f32_to_fp8_e4m3(c));
    x = static_cast<Float>(code) * static_cast<Float>(scale);
  }
}

}  // namespace strata::cuda

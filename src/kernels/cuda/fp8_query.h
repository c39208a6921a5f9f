#pragma once
// The host's copy of how attention over an FP8 cache rounds a query row (fp8_query.cuh): to e4m3
// under the smallest power-of-two scale that brings the row's largest |q| within 448. The tests'
// and benchmarks' references multiply by these values.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace strata::cuda {

// The row's scale (0 for a row of zeros); codes are q / scale rounded to e4m3.
inline float fp8_query_row_scale(float amax) {
  const float need = amax / kFp8E4M3Max;
  if (!(need > 0.0f)) return 0.0f;
  int exponent = 0;
  const float mantissa = std::frexp(need, &exponent);  // need = mantissa * 2^exponent, [0.5, 1)
  return std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

// Rounds the row in place.
template <typename Float>
void round_fp8_query_row(std::span<Float> row) {
  float amax = 0.0f;
  for (Float x : row) amax = std::max(amax, std::abs(static_cast<float>(x)));
  const float scale = fp8_query_row_scale(amax);
  if (scale == 0.0f) return;
  for (Float& x : row) {
    x = static_cast<Float>(fp8_e4m3_to_f32(f32_to_fp8_e4m3(static_cast<float>(x) / scale))) *
        static_cast<Float>(scale);
  }
}

}  // namespace strata::cuda

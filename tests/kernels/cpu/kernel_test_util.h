#pragma once
// Shared helpers of the CPU kernel tests: the tolerance table, deterministic test data, dtype
// round-trips and the error metric.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"

namespace strata::cpu::test_util {

// Tolerances of every CPU kernel against its float64 reference, in one place. Metric: the relative
// L2 error of one output row, ||out - ref|| / ||ref|| (rel_l2_error). References read the same
// BF16/F16-rounded inputs as the kernel, so these bound the kernels' fp32 arithmetic, not storage.
struct Tolerance {
  static constexpr double kAttention = 2e-6;
  static constexpr double kLinear = 2e-6;
  static constexpr double kRmsNorm = 1e-6;
  static constexpr double kRope = 1e-6;
  static constexpr double kActivation = 1e-6;  // per element, relative to max(|ref|, 1e-30)
};

// A deterministic value in [-1, 1) from up to four integer keys (splitmix64 of their mix), so test
// data depends only on what it describes (sequence, position, head, channel), not on call order.
inline float hashed_uniform(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
  x ^= (c + 0x8CB92BA72F3D8DD7ull) * 0x94D049BB133111EBull;
  x ^= (d + 0x1B873593ull) * 0xD6E8FEB86659FD93ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

// The fp32 value a float stored as `dtype` reads back as.
inline float round_to(DType dtype, float v) {
  if (dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (dtype == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// values encoded as `dtype` (F32, BF16 or F16), as raw bytes.
inline std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * static_cast<size_t>(dtype_size(dtype)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

inline TensorView make_view(const void* data, DType dtype, std::vector<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) v.shape[i] = shape[i];
  return v;
}

// ||out - ref|| / ||ref|| over n elements (the absolute L2 error when ref is all zeros).
inline double rel_l2_error(const float* out, const double* ref, int64_t n) {
  double num = 0.0;
  double den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(out[i]) - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline bool bit_equal(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

}  // namespace strata::cpu::test_util

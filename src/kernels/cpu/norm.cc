#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_common.h"

namespace strata::cpu {
namespace {

Status validate(const RmsNormParams& p) {
  if (p.weight.empty() || p.weight.rank != 1 || p.weight.shape[0] <= 0) {
    return Status::InvalidArgument("rms_norm: weight must be a non-null [dim] tensor, dim > 0");
  }
  if (!is_cpu_float_dtype(p.weight.dtype)) {
    return Status::Unsupported("rms_norm: weight dtype " + std::string(dtype_name(p.weight.dtype)) +
                               " (supported: F32, BF16, F16)");
  }
  if (p.num_rows < 0) return Status::InvalidArgument("rms_norm: negative num_rows");
  if (!(p.eps >= 0.0f)) return Status::InvalidArgument("rms_norm: eps must be >= 0");
  if (p.num_rows > 0 && (p.x == nullptr || p.out == nullptr)) {
    return Status::InvalidArgument("rms_norm: x and out must not be null");
  }
  return Status::Ok();
}

// 1 / sqrt(mean(x^2) + eps) for one row. Squares of floats are exact in double, so the only
// rounding is in the float64 sums; the result is rounded once to fp32.
float inv_rms(const float* x, int64_t dim, float eps) {
  double acc[detail::kLanes] = {};
  int64_t i = 0;
  for (; i + detail::kLanes <= dim; i += detail::kLanes) {
    for (int l = 0; l < detail::kLanes; ++l) {
      const double v = x[i + l];
      acc[l] += v * v;
    }
  }
  for (int64_t l = 0; i + l < dim; ++l) {
    const double v = x[i + l];
    acc[l] += v * v;
  }
  const double sum =
      ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  const double mean = sum / static_cast<double>(dim);
  return static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps)));
}

}  // namespace

Status rms_norm(const RmsNormParams& params, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate(params));
  const int64_t dim = params.weight.shape[0];
  std::vector<float> weight(static_cast<size_t>(dim));
  detail::load_f32(params.weight.data, params.weight.dtype, 0, dim, weight.data());
  if (params.unit_offset) {
    for (float& w : weight) w = 1.0f + w;
  }
  const int64_t min_rows = std::max<int64_t>(1, 16384 / dim);
  pool.parallel_for(
      params.num_rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* x = params.x + r * dim;
          float* out = params.out + r * dim;
          const float scale = inv_rms(x, dim, params.eps);
          // Hugging Face order: (x * inv_rms) first, then the weight.
          for (int64_t i = 0; i < dim; ++i)
            out[i] = (x[i] * scale) * weight[static_cast<size_t>(i)];
        }
      },
      min_rows);
  return Status::Ok();
}

}  // namespace strata::cpu

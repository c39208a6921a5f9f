#include "kernels/cpu/linear.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/linear_avx2.h"

namespace strata::cpu {
namespace {

constexpr int64_t kNTile = 16;  // rows of W per task (widened to fp32 together when BF16/F16)
constexpr int64_t kMTile = 64;  // rows of x per task

Status validate(const float* x, const TensorView& weight, const TensorView& bias, const float* out,
                int64_t m) {
  if (weight.empty() || weight.rank != 2) {
    return Status::InvalidArgument("linear: weight must be a non-null [n, k] tensor");
  }
  if (weight.shape[0] <= 0 || weight.shape[1] <= 0) {
    return Status::InvalidArgument("linear: weight dimensions must be positive");
  }
  if (!is_cpu_float_dtype(weight.dtype)) {
    return Status::Unsupported("linear: weight dtype " + std::string(dtype_name(weight.dtype)) +
                               " (supported: F32, BF16, F16)");
  }
  if (!bias.empty()) {
    if (bias.rank != 1 || bias.shape[0] != weight.shape[0]) {
      return Status::InvalidArgument("linear: bias must be [n] with n = weight.dim(0)");
    }
    if (!is_cpu_float_dtype(bias.dtype)) {
      return Status::Unsupported("linear: bias dtype " + std::string(dtype_name(bias.dtype)) +
                                 " (supported: F32, BF16, F16)");
    }
  }
  if (m < 0) return Status::InvalidArgument("linear: negative m");
  if (m > 0 && (x == nullptr || out == nullptr)) {
    return Status::InvalidArgument("linear: x and out must not be null");
  }
  return Status::Ok();
}

// The [mt, nt] block of out at `out` (row stride ldo): dot products, then + bias (if any), so each
// output is exactly dot(x row, w row) + bias[c] in fp32.
void compute_block(const float* x, int64_t mt, const float* w, int64_t nt, int64_t k,
                   const float* bias, float* out, int64_t ldo) {
  detail::matmul_nt(x, k, mt, w, k, nt, k, out, ldo);
  if (bias == nullptr) return;
  for (int64_t r = 0; r < mt; ++r) {
    for (int64_t c = 0; c < nt; ++c) out[r * ldo + c] += bias[c];
  }
}

std::vector<float>& weight_scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

}  // namespace

Status linear(const float* x, TensorView weight, TensorView bias, float* out, int64_t m,
              ThreadPool& pool) {
  return detail::linear_with_isa(best_cpu_isa(), x, weight, bias, out, m, pool);
}

namespace detail {

Status linear_with_isa(CpuIsa isa, const float* x, TensorView weight, TensorView bias, float* out,
                       int64_t m, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate(x, weight, bias, out, m));
  if (!cpu_supports(isa)) {
    return Status::Unsupported(std::string("linear: this CPU cannot run the ") + cpu_isa_name(isa) +
                               " path");
  }
  const int64_t n = weight.shape[0];
  const int64_t k = weight.shape[1];
  if (m == 0) return Status::Ok();
  const int64_t num_m_tiles = (m + kMTile - 1) / kMTile;
  const int64_t num_n_tiles = (n + kNTile - 1) / kNTile;
  const int64_t w_elem_bytes = dtype_size(weight.dtype);
  // Tasks are n-tile major so a thread's consecutive tasks share one weight tile (widened once on
  // the portable path, kept in L1 on the AVX2 path, which reads BF16/F16 weights as they are).
  pool.parallel_for(num_m_tiles * num_n_tiles, [&](int64_t begin, int64_t end) {
    std::vector<float>& scratch = weight_scratch();
    std::array<float, kNTile> bias_tile{};
    const float* w = nullptr;
    int64_t cached_n_tile = -1;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n_tile = task / num_m_tiles;
      const int64_t m0 = (task % num_m_tiles) * kMTile;
      const int64_t n0 = n_tile * kNTile;
      const int64_t nt = std::min(kNTile, n - n0);
      const int64_t mt = std::min(kMTile, m - m0);
      const float* bias_f32 = bias.empty() ? nullptr : bias_tile.data();
      if (n_tile != cached_n_tile) {
        if (!bias.empty()) detail::load_f32(bias.data, bias.dtype, n0, nt, bias_tile.data());
        if (isa == CpuIsa::kPortable) {
          if (weight.dtype == DType::kF32) {
            w = static_cast<const float*>(weight.data) + n0 * k;
          } else {
            scratch.resize(static_cast<size_t>(kNTile * k));
            detail::load_f32(weight.data, weight.dtype, n0 * k, nt * k, scratch.data());
            w = scratch.data();
          }
        }
        cached_n_tile = n_tile;
      }
      switch (isa) {
        case CpuIsa::kPortable:
          compute_block(x + m0 * k, mt, w, nt, k, bias_f32, out + m0 * n + n0, n);
          break;
        case CpuIsa::kAvx2:
          matmul_nt_avx2(x + m0 * k, k, mt,
                         static_cast<const char*>(weight.data) + n0 * k * w_elem_bytes,
                         weight.dtype, nt, k, bias_f32, out + m0 * n + n0, n);
          break;
      }
    }
  });
  return Status::Ok();
}

}  // namespace detail

}  // namespace strata::cpu

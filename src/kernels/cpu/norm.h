#pragma once
// RMSNorm on the CPU with Hugging Face Llama semantics, in fp32:
//   out[r, i] = (x[r, i] * inv_rms(r)) * weight[i],  inv_rms(r) = 1 / sqrt(mean_i(x[r, i]^2) + eps)
// or, with unit_offset (Gemma), * (1 + weight[i]), the sum taken in fp32 as transformers does.
// Used for the per-layer norms (rows = tokens, dim = hidden) and for Qwen3's per-head q/k norm
// (rows = tokens * heads, dim = head_dim).
//
// Determinism: each row is computed on its own with a fixed order (the sum of squares in float64,
// 8 interleaved partial sums combined in a fixed tree), independent of num_rows and thread count.
// Cost: 3 * num_rows * dim flops; rows are split over the ThreadPool.

#include <cstdint>

#include "core/status.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace strata::cpu {

struct RmsNormParams {
  const float* x = nullptr;  // [num_rows, dim], dim = weight.dim(0)
  // [num_rows, dim]; may equal x (in place), must not otherwise overlap it.
  float* out = nullptr;
  TensorView weight;     // [dim], rank 1, F32, BF16 or F16
  int64_t num_rows = 0;  // >= 0
  float eps = 1e-6f;     // >= 0 (config.json rms_norm_eps)
  bool unit_offset = false;  // multiply by (1 + weight) instead of weight
};

// Errors (nothing is written): InvalidArgument for null pointers, a weight that is not [dim] with
// dim > 0, negative num_rows or eps; Unsupported for a weight dtype outside F32/BF16/F16.
Status rms_norm(const RmsNormParams& params, ThreadPool& pool);

}  // namespace strata::cpu

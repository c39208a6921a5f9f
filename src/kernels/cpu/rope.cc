#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace strata::cpu {
namespace {

Status validate(const RopeParams& p) {
  if (p.head_dim <= 0 || p.head_dim % 2 != 0) {
    return Status::InvalidArgument("rope: head_dim must be positive and even");
  }
  if (p.num_q_heads <= 0 || p.num_kv_heads <= 0) {
    return Status::InvalidArgument("rope: num_q_heads and num_kv_heads must be positive");
  }
  if (p.num_tokens < 0) return Status::InvalidArgument("rope: negative num_tokens");
  if (p.inv_freq == nullptr) return Status::InvalidArgument("rope: inv_freq must not be null");
  if (p.num_tokens > 0 && (p.q == nullptr || p.k == nullptr || p.positions == nullptr)) {
    return Status::InvalidArgument("rope: q, k and positions must not be null");
  }
  return Status::Ok();
}

// Rotates num_heads heads of one token with the token's cos/sin tables ([half] each).
void rotate_heads(float* x, int32_t num_heads, int32_t head_dim, const float* cos_t,
                  const float* sin_t) {
  const int32_t half = head_dim / 2;
  for (int32_t h = 0; h < num_heads; ++h) {
    float* lo = x + static_cast<int64_t>(h) * head_dim;
    float* hi = lo + half;
    for (int32_t i = 0; i < half; ++i) {
      const float x1 = lo[i];
      const float x2 = hi[i];
      lo[i] = x1 * cos_t[i] - x2 * sin_t[i];
      hi[i] = x2 * cos_t[i] + x1 * sin_t[i];
    }
  }
}

}  // namespace

Status apply_rope(const RopeParams& params, ThreadPool& pool) {
  STRATA_RETURN_IF_ERROR(validate(params));
  const int32_t half = params.head_dim / 2;
  const int64_t q_row = static_cast<int64_t>(params.num_q_heads) * params.head_dim;
  const int64_t k_row = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
  const double scaling = params.attention_scaling;
  pool.parallel_for(
      params.num_tokens,
      [&](int64_t begin, int64_t end) {
        std::vector<float> cos_t(static_cast<size_t>(half));
        std::vector<float> sin_t(static_cast<size_t>(half));
        for (int64_t t = begin; t < end; ++t) {
          const double position = params.positions[t];
          for (int32_t i = 0; i < half; ++i) {
            const double angle = position * static_cast<double>(params.inv_freq[i]);
            cos_t[static_cast<size_t>(i)] = static_cast<float>(std::cos(angle) * scaling);
            sin_t[static_cast<size_t>(i)] = static_cast<float>(std::sin(angle) * scaling);
          }
          rotate_heads(params.q + t * q_row, params.num_q_heads, params.head_dim, cos_t.data(),
                       sin_t.data());
          rotate_heads(params.k + t * k_row, params.num_kv_heads, params.head_dim, cos_t.data(),
                       sin_t.data());
        }
      },
      /*min_chunk=*/8);
  return Status::Ok();
}

}  // namespace strata::cpu

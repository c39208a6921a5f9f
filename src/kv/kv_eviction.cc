#include "kv/kv_eviction.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "core/dtype.h"

namespace strata::kv {

std::vector<int32_t> choose_evicted_blocks(const ResolvedKvEviction& policy, int32_t num_tokens,
                                           int32_t block_size,
                                           std::span<const float> block_scores) {
  STRATA_CHECK(block_size > 0 && num_tokens >= 0, "choose_evicted_blocks: bad sizes");
  if (!policy.active() || num_tokens <= policy.budget_tokens) return {};
  const int32_t num_blocks = (num_tokens + block_size - 1) / block_size;
  const bool by_score = policy.policy == KvEvictionPolicy::kPagedEviction;
  STRATA_CHECK(!by_score || static_cast<int32_t>(block_scores.size()) == num_blocks,
               "PagedEviction needs one score per block");
  // Entries [0, first_candidate) hold the sink positions; [first_window, num_blocks) the newest
  // W slots and the newest (partly filled) block.
  const int32_t sink_blocks =
      std::min((policy.sink_tokens + block_size - 1) / block_size, num_blocks);
  const int32_t window_start = std::max(num_tokens - policy.window_tokens, 0);
  const int32_t first_window = std::min(window_start / block_size, num_blocks - 1);
  std::vector<int32_t> candidates;
  for (int32_t i = sink_blocks; i < first_window; ++i) candidates.push_back(i);
  if (by_score) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
      return block_scores[static_cast<size_t>(a)] < block_scores[static_cast<size_t>(b)];
    });
  }
  std::vector<int32_t> evicted;
  int32_t left = num_tokens;
  for (const int32_t i : candidates) {
    if (left <= policy.budget_tokens) break;
    evicted.push_back(i);
    left -= block_size;  // a candidate is never the newest block: it is full
  }
  std::sort(evicted.begin(), evicted.end());
  return evicted;
}

int64_t max_held_slots(const ResolvedKvEviction& policy, int32_t block_size) {
  STRATA_CHECK(policy.active() && block_size > 0, "max_held_slots: an active policy");
  const int64_t bs = block_size;
  const int64_t sink = (policy.sink_tokens + bs - 1) / bs * bs;
  const int64_t protected_slots = sink + std::max<int64_t>(policy.window_tokens + bs - 1, bs);
  return std::max<int64_t>(policy.budget_tokens, protected_slots) + bs;
}

bool can_score_blocks(const KvLayout& layout) {
  for (int32_t l = 0; l < layout.spec().num_layers; ++l) {
    const DType d = layout.spec().layer_dtype(l);
    if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16) return false;
  }
  return true;
}

namespace {

// Element i of a 32- or 16-bit float array of dtype d (can_score_blocks has checked d).
float element(const std::byte* data, DType d, int64_t i) {
  if (d == DType::kF32) {
    float x;
    std::memcpy(&x, data + i * 4, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, data + i * 2, 2);
  return d == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

}  // namespace

float block_value_key_ratio(const KvLayout& layout, const std::byte* block, int32_t num_tokens) {
  const KvSpec& spec = layout.spec();
  const int32_t bs = layout.block_size();
  STRATA_CHECK(num_tokens >= 1 && num_tokens <= bs, "block_value_key_ratio: bad token count");
  STRATA_CHECK(can_score_blocks(layout), "block_value_key_ratio: a KV dtype it cannot read");
  double sum = 0.0;
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    const DType d = spec.layer_dtype(l);
    const std::byte* k = block + layout.k_offset_bytes(l);
    const std::byte* v = block + layout.v_offset_bytes(l);
    for (int32_t h = 0; h < spec.num_kv_heads; ++h) {
      for (int32_t t = 0; t < num_tokens; ++t) {
        const int64_t base = (static_cast<int64_t>(h) * bs + t) * spec.head_dim;
        double kk = 0.0, vv = 0.0;
        for (int32_t c = 0; c < spec.head_dim; ++c) {
          const double kx = element(k, d, base + c), vx = element(v, d, base + c);
          kk += kx * kx;
          vv += vx * vx;
        }
        sum += std::sqrt(vv) / std::max(std::sqrt(kk), 1e-12);
      }
    }
  }
  const double n = static_cast<double>(spec.num_layers) * spec.num_kv_heads * num_tokens;
  return static_cast<float>(sum / n);
}

}  // namespace strata::kv

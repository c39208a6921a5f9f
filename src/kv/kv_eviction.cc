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

int64_t max_held_slots(const ResolvedKvEviction& policy, int32_t block_size, int64_t num_prompt,
                       int64_t max_tokens) {
  STRATA_CHECK(policy.active() && block_size > 0, "max_held_slots: an active policy");
  const int64_t bs = block_size;
  const int64_t step = policy.prefill_interval(block_size);  // the most slots a step adds
  const int64_t total = num_prompt + max_tokens;
  switch (policy.policy) {
    case KvEvictionPolicy::kH2O:
      return std::min<int64_t>(total, policy.budget_tokens + step);
    case KvEvictionPolicy::kSnapKv:
      return std::min<int64_t>(total,
                               std::max<int64_t>(num_prompt, policy.budget_tokens + max_tokens));
    case KvEvictionPolicy::kNone:
    case KvEvictionPolicy::kStreamingLlm:
    case KvEvictionPolicy::kPagedEviction:
      break;
  }
  const int64_t sink = (policy.sink_tokens + bs - 1) / bs * bs;
  const int64_t protected_slots = sink + std::max<int64_t>(policy.window_tokens + bs - 1, bs);
  return std::min<int64_t>(total,
                           std::max<int64_t>(policy.budget_tokens, protected_slots) + step);
}

std::vector<int32_t> choose_evicted_tokens(const ResolvedKvEviction& policy,
                                           std::span<const int32_t> positions,
                                           std::span<const float> scores,
                                           std::span<const uint8_t> locked, int32_t window_end) {
  const auto n = static_cast<int32_t>(positions.size());
  STRATA_CHECK(
      scores.size() == positions.size() && (locked.empty() || locked.size() == positions.size()),
      "choose_evicted_tokens: one position, score (and lock) per slot");
  if (!policy.active() || n <= policy.budget_tokens) return {};
  const int64_t window_start = int64_t{window_end} - policy.window_tokens;
  std::vector<int32_t> candidates;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = positions[static_cast<size_t>(i)];
    if (pos < policy.sink_tokens || pos >= window_start) continue;
    if (!locked.empty() && locked[static_cast<size_t>(i)] != 0) continue;
    candidates.push_back(i);
  }
  // The count lowest under a strict total order (positions are distinct), so the set is the
  // same whatever the selection does with ties: a partial selection, O(candidates), not a sort
  // (H2O takes one token of its budget's slots at every decode step).
  const auto count = static_cast<std::ptrdiff_t>(
      std::min<size_t>(candidates.size(), static_cast<size_t>(n - policy.budget_tokens)));
  std::nth_element(candidates.begin(), candidates.begin() + count, candidates.end(),
                   [&](int32_t a, int32_t b) {
                     const float sa = scores[static_cast<size_t>(a)];
                     const float sb = scores[static_cast<size_t>(b)];
                     if (sa != sb) return sa < sb;
                     return positions[static_cast<size_t>(a)] < positions[static_cast<size_t>(b)];
                   });
  candidates.resize(static_cast<size_t>(count));
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

std::vector<std::pair<int32_t, int32_t>> compaction_moves(int32_t num_tokens,
                                                          std::span<const int32_t> slots) {
  for (size_t k = 0; k < slots.size(); ++k) {
    STRATA_CHECK(slots[k] >= 0 && slots[k] < num_tokens && (k == 0 || slots[k] > slots[k - 1]),
                 "compaction: slots must be ascending, distinct and held");
  }
  const int32_t kept = num_tokens - static_cast<int32_t>(slots.size());
  std::vector<std::pair<int32_t, int32_t>> moves;
  size_t next_removed = 0;  // the first removed slot at or past K
  while (next_removed < slots.size() && slots[next_removed] < kept) ++next_removed;
  int32_t from = kept;
  for (size_t h = 0; h < slots.size() && slots[h] < kept; ++h) {
    while (next_removed < slots.size() && slots[next_removed] == from) {
      ++from;
      ++next_removed;
    }
    moves.emplace_back(from, slots[h]);
    ++from;
  }
  return moves;
}

std::vector<float> pool_scores(std::span<const float> scores, int32_t kernel,
                               KvEvictionPooling pooling) {
  STRATA_CHECK(kernel >= 1 && kernel % 2 == 1, "pool_scores: an odd kernel");
  const auto n = static_cast<int64_t>(scores.size());
  const int64_t half = kernel / 2;
  std::vector<float> out(scores.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t first = std::max<int64_t>(0, i - half), last = std::min(n - 1, i + half);
    switch (pooling) {
      case KvEvictionPooling::kMax: {
        float m = scores[static_cast<size_t>(first)];
        for (int64_t j = first + 1; j <= last; ++j) m = std::max(m, scores[static_cast<size_t>(j)]);
        out[static_cast<size_t>(i)] = m;
        break;
      }
      case KvEvictionPooling::kAvg: {
        double sum = 0.0;
        for (int64_t j = first; j <= last; ++j) sum += scores[static_cast<size_t>(j)];
        out[static_cast<size_t>(i)] = static_cast<float>(sum / kernel);
        break;
      }
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> choose_evicted_tokens_per_head(
    const ResolvedKvEviction& policy, std::span<const int32_t> positions,
    std::span<const std::vector<float>> head_scores, std::span<const uint8_t> locked,
    int32_t window_end) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(head_scores.size());
  for (const std::vector<float>& scores : head_scores) {
    out.push_back(choose_evicted_tokens(policy, positions, scores, locked, window_end));
    STRATA_CHECK(out.back().size() == out.front().size(),
                 "choose_evicted_tokens_per_head: heads gave up different counts");
  }
  if (!out.empty() && out.front().empty()) out.clear();
  return out;
}

bool can_score_blocks(const KvLayout& layout) {
  // I4's codes stand against per-channel statistics of the whole block.
  for (int32_t l = 0; l < layout.spec().num_layers; ++l) {
    const DType d = layout.spec().layer_dtype(l);
    if (!is_kv_pool_dtype(d) || d == DType::kI4) return false;
  }
  return true;
}

namespace {

// Element i of a K or V area of dtype d (can_score_blocks has checked d), without its scale: a
// layer's static FP8 scale and an INT8 token's scale multiply every element of a token's vector
// alike, so block_value_key_ratio applies them to the norms.
float element(const std::byte* data, DType d, int64_t i) {
  switch (d) {
    case DType::kF32: {
      float x;
      std::memcpy(&x, data + i * 4, 4);
      return x;
    }
    case DType::kF8E4M3:
      return fp8_e4m3_to_f32(static_cast<uint8_t>(data[i]));
    case DType::kF8E5M2:
      return fp8_e5m2_to_f32(static_cast<uint8_t>(data[i]));
    case DType::kI8:
      return static_cast<float>(static_cast<int8_t>(data[i]));
    default: {
      uint16_t h;
      std::memcpy(&h, data + i * 2, 2);
      return d == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
}

// The scale of token t of KV head h in one layer's K or V: FP8's static per-layer scale, INT8's
// fp16 per-(head, token) scale at scales ([kv_heads][block]), 1 for the float dtypes.
double token_scale(DType d, float static_scale, const std::byte* scales, int64_t index) {
  if (d == DType::kF8E4M3 || d == DType::kF8E5M2) return static_scale;
  if (d != DType::kI8) return 1.0;
  uint16_t h;
  std::memcpy(&h, scales + index * 2, 2);
  return f16_to_f32(h);
}

}  // namespace

float block_value_key_ratio(const KvLayout& layout, const std::byte* block, int32_t num_tokens) {
  const KvSpec& spec = layout.spec();
  const int32_t bs = layout.block_size();
  STRATA_CHECK(num_tokens >= 1 && num_tokens <= bs, "block_value_key_ratio: bad token count");
  STRATA_CHECK(can_score_blocks(layout), "block_value_key_ratio: a KV dtype it cannot read");
  const KvStaticScales& fixed = layout.static_scales();
  double sum = 0.0;
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    const DType d = spec.layer_dtype(l);
    const std::byte* k = block + layout.k_offset_bytes(l);
    const std::byte* v = block + layout.v_offset_bytes(l);
    const bool fp8 = d == DType::kF8E4M3 || d == DType::kF8E5M2;
    const float k_fixed = fp8 ? fixed.k[static_cast<size_t>(l)] : 1.0f;
    const float v_fixed = fp8 ? fixed.v[static_cast<size_t>(l)] : 1.0f;
    const std::byte* k_scales = block + layout.k_scale_offset_bytes(l);  // read for I8 only
    const std::byte* v_scales = block + layout.v_scale_offset_bytes(l);
    for (int32_t h = 0; h < spec.num_kv_heads; ++h) {
      for (int32_t t = 0; t < num_tokens; ++t) {
        const int64_t token = static_cast<int64_t>(h) * bs + t;
        const int64_t base = token * spec.head_dim;
        double kk = 0.0, vv = 0.0;
        for (int32_t c = 0; c < spec.head_dim; ++c) {
          const double kx = element(k, d, base + c), vx = element(v, d, base + c);
          kk += kx * kx;
          vv += vx * vx;
        }
        const double k_norm = std::sqrt(kk) * std::fabs(token_scale(d, k_fixed, k_scales, token));
        const double v_norm = std::sqrt(vv) * std::fabs(token_scale(d, v_fixed, v_scales, token));
        sum += v_norm / std::max(k_norm, 1e-12);
      }
    }
  }
  const double n = static_cast<double>(spec.num_layers) * spec.num_kv_heads * num_tokens;
  return static_cast<float>(sum / n);
}

}  // namespace strata::kv

#include "kv/kv_group.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace strata::kv {

const char* kv_group_kind_name(KvGroupKind kind) {
  switch (kind) {
    case KvGroupKind::kFullAttention:
      return "full attention";
    case KvGroupKind::kSlidingWindow:
      return "sliding window";
    case KvGroupKind::kNewestBlocks:
      return "newest blocks";
  }
  return "?";
}

KvGroupSpec KvGroupSpec::full(const KvSpec& kv) {
  return KvGroupSpec{.kind = KvGroupKind::kFullAttention, .kv = kv};
}

KvGroupSpec KvGroupSpec::windowed(int32_t window, const KvSpec& kv) {
  STRATA_CHECK(window >= 1, "a sliding-window group needs a window of at least 1 position");
  return KvGroupSpec{.kind = KvGroupKind::kSlidingWindow, .window = window, .kv = kv};
}

KvGroupSpec KvGroupSpec::newest(int32_t blocks, const KvSpec& kv) {
  STRATA_CHECK(blocks >= 1, "a newest-blocks group keeps at least 1 block");
  return KvGroupSpec{.kind = KvGroupKind::kNewestBlocks, .newest_blocks = blocks, .kv = kv};
}

int32_t KvGroupSpec::first_needed_block(int32_t pos, int32_t block_size) const {
  switch (kind) {
    case KvGroupKind::kFullAttention:
      return 0;
    case KvGroupKind::kSlidingWindow:
      return std::min(std::max(pos - window + 1, 0), std::max(pos - 1, 0)) / block_size;
    case KvGroupKind::kNewestBlocks:
      return std::max(0, pos / block_size - newest_blocks + 1);
  }
  return 0;
}

int64_t KvGroupSpec::max_blocks_per_sequence(int64_t num_tokens, int32_t block_size) const {
  const int64_t all = (num_tokens + block_size - 1) / block_size;
  switch (kind) {
    case KvGroupKind::kFullAttention:
      return all;
    case KvGroupKind::kSlidingWindow:
      return std::min<int64_t>(all, (window + block_size - 1) / block_size + 1);
    case KvGroupKind::kNewestBlocks:
      return std::min<int64_t>(all, newest_blocks);
  }
  return all;
}

int32_t newest_blocks_pool_size(int32_t max_num_seqs, int32_t newest_blocks,
                                int32_t max_num_batched_tokens, int32_t block_size) {
  STRATA_CHECK(
      max_num_seqs >= 1 && newest_blocks >= 1 && max_num_batched_tokens >= 1 && block_size >= 1,
      "newest_blocks_pool_size: positive limits");
  const int64_t blocks = int64_t{max_num_seqs} * (newest_blocks + 1) +
                         (int64_t{max_num_batched_tokens} + block_size - 1) / block_size + 1;
  return static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

std::optional<HybridKvLayers> hybrid_kv_layers(std::span<const int32_t> layer_windows) {
  HybridKvLayers h;
  for (size_t l = 0; l < layer_windows.size(); ++l) {
    const bool windowed = layer_windows[l] > 0;
    std::vector<int32_t>& group = windowed ? h.windowed : h.full;
    h.slots.push_back({windowed ? 1 : 0, static_cast<int32_t>(group.size())});
    group.push_back(static_cast<int32_t>(l));
    if (windowed) h.window = std::max(h.window, layer_windows[l]);
  }
  if (h.full.empty() || h.windowed.empty()) return std::nullopt;
  return h;
}

KvSpec sub_spec(const KvSpec& spec, std::span<const int32_t> layers) {
  KvSpec s = spec;
  s.num_layers = static_cast<int32_t>(layers.size());
  s.layer_dtypes.clear();
  for (const int32_t l : layers) {
    STRATA_CHECK(l >= 0 && l < spec.num_layers, "sub_spec: layer out of range");
    if (!spec.layer_dtypes.empty()) s.layer_dtypes.push_back(spec.layer_dtype(l));
  }
  return s;
}

KvLayout sub_layout(const KvLayout& layout, std::span<const int32_t> layers) {
  const KvSpec spec = sub_spec(layout.spec(), layers);
  KvStaticScales scales;
  const KvStaticScales& all = layout.static_scales();
  bool any_fp8 = false;
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    const DType d = spec.layer_dtype(l);
    any_fp8 = any_fp8 || d == DType::kF8E4M3 || d == DType::kF8E5M2;
  }
  if (any_fp8 && !all.k.empty()) {
    for (const int32_t l : layers) {
      scales.k.push_back(all.k[static_cast<size_t>(l)]);
      scales.v.push_back(all.v[static_cast<size_t>(l)]);
    }
  }
  return KvLayout(spec, layout.block_size(), scales);
}

bool needs_newest_blocks_group(const KvSpec& spec) {
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    if (spec.layer_dtype(l) == DType::kI4) return true;
  }
  return false;
}

KvSpec newest_blocks_spec(const KvSpec& spec, DType dtype) {
  KvSpec r;
  r.num_layers = spec.num_layers;
  r.num_kv_heads = spec.num_kv_heads;
  r.head_dim = spec.head_dim;
  r.dtype = dtype;
  return r;
}

std::optional<std::string> int4_residual_error(int32_t tokens, int32_t block_size, bool int4) {
  if (tokens != 0 && !int4) return "--kv-int4-residual applies to --kv-cache-dtype int4 only";
  if (tokens < 0 || tokens % block_size != 0) {
    return "--kv-int4-residual " + std::to_string(tokens) +
           " must be a positive multiple of the block size (" + std::to_string(block_size) + ")";
  }
  return std::nullopt;
}

int32_t int4_residual_blocks(int32_t tokens, int32_t block_size) {
  return tokens > 0 ? tokens / block_size : 1;
}

}  // namespace strata::kv

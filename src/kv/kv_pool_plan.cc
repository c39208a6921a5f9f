#include "kv/kv_pool_plan.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "kv/kv_accounting.h"

namespace strata::kv {

KvGroupsPlan plan_kv_groups(const KvGroupsRequest& r) {
  const KvPoolLimits& lim = r.limits;
  std::vector<int32_t> windows = r.layer_windows;
  windows.resize(static_cast<size_t>(r.spec.num_layers), 0);
  std::vector<int32_t> all(windows.size());
  std::iota(all.begin(), all.end(), 0);
  KvGroupsPlan plan;
  const bool int4 = needs_newest_blocks_group(r.spec);
  const std::optional<HybridKvLayers> hybrid =
      r.hybrid_groups && !int4 ? hybrid_kv_layers(windows) : std::nullopt;
  if (hybrid) {
    // The windowed layers' pool: a running sequence holds at most ceil(W / B) + 1 of their blocks
    // between steps and ceil(chunk / B) + 1 more during one.
    const int32_t held = (hybrid->window + lim.block_size - 1) / lim.block_size + 2;
    plan.groups.push_back({KvGroupSpec::full(sub_spec(r.spec, hybrid->full)), hybrid->full, 0});
    plan.groups.push_back(
        {KvGroupSpec::windowed(hybrid->window, sub_spec(r.spec, hybrid->windowed)),
         hybrid->windowed,
         newest_blocks_pool_size(lim.max_num_seqs, held, lim.max_num_batched_tokens,
                                 lim.block_size)});
    plan.slots = hybrid->slots;
    plan.reserved_what = kWindowedLayersPool;
  } else {
    plan.window = pool_sliding_window(windows);
    plan.groups.push_back(
        {plan.window > 0 ? KvGroupSpec::windowed(plan.window, r.spec) : KvGroupSpec::full(r.spec),
         all, 0});
    if (int4) {
      plan.groups.push_back({KvGroupSpec::newest(r.int4_residual_blocks,
                                                 newest_blocks_spec(r.spec, r.full_precision)),
                             all,
                             newest_blocks_pool_size(lim.max_num_seqs, r.int4_residual_blocks,
                                                     lim.max_num_batched_tokens, lim.block_size)});
      plan.reserved_what = kInt4ResidualPool;
    }
  }
  for (size_t g = 1; g < plan.groups.size(); ++g) {
    plan.reserved_bytes += plan.groups[g].pool_bytes(lim.block_size);
  }
  return plan;
}

Result<int32_t> memory_pool_blocks(int64_t kv_memory_bytes, int64_t reserved_bytes,
                                   const std::string& reserved_what, int64_t block_bytes,
                                   int32_t block_size) {
  if (reserved_bytes > 0 && reserved_bytes >= kv_memory_bytes) {
    return Status::InvalidArgument(
        "the KV cache memory (" + std::to_string(kv_memory_bytes) + " bytes) does not exceed the " +
        reserved_what + " " + std::to_string(reserved_bytes) +
        " bytes (lower --max-num-seqs, --max-num-batched-tokens" +
        (reserved_what == kInt4ResidualPool ? " or --kv-int4-residual)" : ")"));
  }
  const int64_t bytes = kv_memory_bytes - reserved_bytes;
  const int64_t blocks = bytes / block_bytes;
  if (blocks < 2) {
    return Status::InvalidArgument(
        "the KV cache memory (" + std::to_string(bytes) + " bytes" +
        (reserved_bytes > 0
             ? " after the " + reserved_what + " " + std::to_string(reserved_bytes) + " bytes"
             : std::string()) +
        ") holds fewer than 2 blocks of " + std::to_string(block_bytes) + " bytes (block size " +
        std::to_string(block_size) + "): give the KV cache more memory");
  }
  return static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

}  // namespace strata::kv

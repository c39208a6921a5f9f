#pragma once
// How an engine's KV memory becomes pools: which KV cache groups a model's cache has, and how
// many blocks each pool gets. The one sizing rule: the engine builds its pools with it (CPU and
// GPU) and `strata plan` reports it, so the plan cannot disagree with the engine (docs/kv.md,
// "Sizing the pools").
//
//   group 0          every layer (full attention, or a sliding window when every layer has one);
//                    a hybrid model's full-attention layers only. Sized by memory: what the KV
//                    memory holds after the other pools, in blocks of its layers' bytes.
//   windowed layers  a hybrid model's sliding-window layers (when hybrid groups are on): sized by
//                    the scheduler's limits, newest_blocks_pool_size with R = ceil(W / B) + 2.
//   newest blocks    an INT4 cache's full-precision newest blocks: sized by the limits with R =
//                    --kv-int4-residual's blocks.
//
// The limit-sized pools come out of the KV memory first; a hybrid model with INT4 layers keeps
// every layer in group 0 (the INT4 group takes the second pool).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_group.h"
#include "kv/kv_layout.h"

namespace strata::kv {

struct KvPoolLimits {
  int32_t block_size = 16;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
};

// What decides the groups: the model's KV (every layer, dtypes resolved), its layers' windows,
// the limits, and the backend's choices.
struct KvGroupsRequest {
  KvSpec spec;                         // every model layer
  std::vector<int32_t> layer_windows;  // per model layer; <= 0 (or missing) = full attention
  KvPoolLimits limits;
  int32_t int4_residual_blocks = 1;    // R of the newest-blocks group (int4_residual_blocks)
  DType full_precision = DType::kF32;  // the newest-blocks pool's dtype: F32 CPU, BF16 GPU
  bool hybrid_groups = true;           // a hybrid model's windowed layers in a group of their own
};

struct KvPoolGroup {
  KvGroupSpec spec;             // kind, window or R, and the pool's KvSpec (bytes per block)
  std::vector<int32_t> layers;  // the model layers whose K/V the pool holds, in its order
  int32_t num_blocks = 0;       // the null block included; group 0: 0 until sized by memory
  int64_t pool_bytes(int32_t block_size) const { return spec.block_bytes(block_size) * num_blocks; }
};

struct KvGroupsPlan {
  std::vector<KvPoolGroup> groups;
  std::vector<KvLayerSlot> slots;  // per model layer when groups split the layers; else empty
  int32_t window = 0;              // group 0's sliding window, 0 = full attention
  // The limit-sized pools' bytes, taken from the KV memory before group 0 is sized.
  int64_t reserved_bytes = 0;
  std::string reserved_what;  // names them in errors: kInt4ResidualPool, kWindowedLayersPool
};
inline constexpr const char* kInt4ResidualPool = "int4 residual pool's";
inline constexpr const char* kWindowedLayersPool = "windowed layers' pool's";

// The groups, the limit-sized ones with their blocks. Caller-checked: limits >= 1, R >= 1.
KvGroupsPlan plan_kv_groups(const KvGroupsRequest& request);

// Group 0's blocks (the null block included): kv_memory_bytes less the limit-sized pools'
// reserved_bytes (reserved_what names them: KvGroupsPlan's), in blocks of block_bytes, at most
// 2^30. InvalidArgument, naming those pools and the flags that shrink them, when nothing or fewer
// than two blocks remain.
Result<int32_t> memory_pool_blocks(int64_t kv_memory_bytes, int64_t reserved_bytes,
                                   const std::string& reserved_what, int64_t block_bytes,
                                   int32_t block_size);
inline Result<int32_t> memory_pool_blocks(const KvGroupsPlan& plan, int64_t kv_memory_bytes,
                                          int32_t block_size) {
  return memory_pool_blocks(kv_memory_bytes, plan.reserved_bytes, plan.reserved_what,
                            plan.groups.front().spec.block_bytes(block_size), block_size);
}

}  // namespace strata::kv

#pragma once
// KvGroupManager: one KV cache group's blocks (kv_group.h) -- its BlockPool, what its kind lets
// it give back, its copy-on-write copies, and, for a group after the first, the cached copies it
// keeps beside the first group's prefix cache. KvCacheManager owns one per group and drives them
// together; nothing else calls it.
//
// Each operation works on the group's row of a BlockTable (logical block i -> a block of this
// pool, kNullBlock in the leading entries the group has given back or never kept):
//   plan / allocate    the blocks new tokens need: a new block per new logical block, the free
//                      ones of a prefix hit's row, a copy of a shared, partly filled last block
//   free_before        gives back leading entries no query reads any more
//   fork / free        share every block of a row / drop the row's references, tail first
//
// A group after the first keeps its prefix cache through the first group's: each of its full
// blocks is cached in its own pool (LRU-evicted like any freed cached block) and linked to the
// first group's cached block holding the same positions; a hit takes the copies its kind needs
// through those links (copy_of). Links are checked against both blocks' cache generations, so an
// evicted or recached block never serves another prompt's KV.
//
// Not thread-safe (the scheduler thread owns it). Cost: O(blocks touched) per call.

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_group.h"

namespace strata::kv {

// One block copy a step must run before its forward pass (the bytes live in the group's buffer).
struct BlockCopy {
  BlockId src;
  BlockId dst;
  bool operator==(const BlockCopy&) const = default;
};

// One token row copy (every layer's K and V at a slot, an INT8 layer's scales with them): token
// eviction's compaction (KvCacheManager::compact_tokens). Slots are block_id * block_size +
// offset. head >= 0: only that (layer, KV head)'s K and V (and scales), head = layer *
// num_kv_heads + kv_head (KvCacheManager::compact_head_tokens, SnapKV per head).
struct SlotCopy {
  int64_t src;
  int64_t dst;
  int32_t head = -1;
  bool operator==(const SlotCopy&) const = default;
};

class KvGroupManager {
 public:
  // Allocating one row's slots: blocks given back first, then blocks taken from the free queue.
  struct Plan {
    int32_t first_needed = 0;   // the first logical block the new positions' queries read
    int32_t num_reclaimed = 0;  // leading entries given back that return to the free queue
    int32_t num_new = 0;        // for new logical blocks
    int32_t num_hit_free = 0;   // a prefix hit's blocks that leave the free queue
    bool copy_last = false;     // the shared, partly filled last block is copied first
    int32_t num_blocks() const { return num_new + num_hit_free + (copy_last ? 1 : 0); }
  };

  KvGroupManager(const KvGroupSpec& spec, const BlockPoolConfig& pool);

  const KvGroupSpec& spec() const { return spec_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // What giving the table's row g -- running through logical block ceil(first_pos /
  // block_size) - 1, or hit_row when not empty: the row a prefix hit of first_pos tokens hands
  // over -- slots for num_new_tokens more positions does: the leading entries no query from
  // first_pos on reads go back, then blocks are taken. Side-effect free.
  Plan plan(const BlockTable& table, int32_t g, std::span<const BlockId> hit_row, int32_t first_pos,
            int32_t num_new_tokens) const;
  // Whether the plan's blocks are there, with `keep` blocks left free.
  bool fits(const Plan& plan, int32_t keep) const {
    return plan.num_blocks() <= pool_.num_free_blocks() + plan.num_reclaimed - keep;
  }
  // Applies plan: the table's row becomes hit_row (one reference each) when not empty, else its
  // leading entries before plan.first_needed go back; then a copy replaces a shared, partly
  // filled last block (queued in pending copies), then new blocks are appended. The plan must
  // fit.
  void allocate(BlockTable& table, int32_t g, const Plan& plan, std::span<const BlockId> hit_row,
                int32_t num_blocks_after);

  // Gives back the row's entries before logical block end (never one it does not hold), leaving
  // kNullBlock there.
  void free_before(BlockTable& table, int32_t g, int32_t end);
  // Drops the row's references, last block first, and empties it.
  void free(BlockTable& table, int32_t g);
  // child's row shares every block of parent's (one more reference each).
  void fork(const BlockTable& parent, BlockTable& child, int32_t g);

  std::vector<BlockCopy> take_pending_copies();

  // ---- groups after the first: their cached copies ---------------------------------------------
  // Caches the row's entry for full logical block i (if it holds one) and links it to `primary`,
  // the first group's cached block holding the same positions (primary_gen: its cache
  // generation). No-op when primary already has a live copy.
  void cache_copy(const BlockTable& table, int32_t g, int32_t i, BlockId primary,
                  uint32_t primary_gen, const BlockHash& hash, std::span<const int32_t> tokens,
                  const BlockExtraKeys& extra);
  // The same for an in-use block of this pool that holds primary's positions (the KV tiers bring
  // one back), or a cached one: true when it, or an identical cached copy, is linked now.
  bool link_copy(BlockId block, BlockId primary, uint32_t primary_gen, const BlockHash& hash,
                 std::span<const int32_t> tokens, const BlockExtraKeys& extra);
  // The live copy of the first group's cached block `primary` (primary_gen: its cache generation
  // now; call only while it is cached), if any.
  std::optional<BlockId> copy_of(BlockId primary, uint32_t primary_gen) const;

 private:
  KvGroupSpec spec_;
  BlockPool pool_;
  std::vector<BlockCopy> pending_copies_;
  struct CopyLink {
    BlockId copy;
    uint32_t copy_gen = 0;
    uint32_t primary_gen = 0;
  };
  std::unordered_map<int32_t, CopyLink> links_;  // first group's block id -> its copy here
};

}  // namespace strata::kv

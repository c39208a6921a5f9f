#pragma once
// BlockTable: one sequence's blocks in logical order, one row per KV cache group (kv_group.h),
// and how many token positions have a slot.
//
// Token position p of the sequence lives, in group g, in blocks(g)[p / block_size] at offset
// p % block_size; its slot is block_id * block_size + offset. Every row covers the same logical
// blocks; a group that no longer keeps a block (a sliding window's past, an INT4 cache's older
// full-precision blocks) holds kNullBlock there, always as a prefix of its row
// (num_skipped_blocks(g)). The table owns one reference to each of its blocks. Growing a table of
// one group is transactional: append_slots either allocates every block it needs or changes
// nothing. Cost: O(new blocks) per append.
//
// KvCacheManager is the only writer of the rows beyond the first, of the hash chain of the
// table's full blocks (block_hashes()), of how many leading blocks are in the prefix cache, and
// of a shared last block's replacement on copy-on-write. A table starts with one row; the
// manager gives it one per group on its first allocation.
//
// Token eviction (kv_eviction.h, KvCacheManager::evict_blocks) takes whole blocks out of the
// middle of a one-group table's row and closes the gap: the row stays compact, so "position" above
// means the table's KV slot index, and num_evicted_tokens() positions of the sequence are no
// longer there (a sequence's RoPE position is slot index + the evicted positions before it; its
// next position is num_tokens() + num_evicted_tokens()).

#include <cstdint>
#include <span>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace strata::kv {

// How many entries at the start of a row are kNullBlock (a group's given-back entries).
int32_t num_leading_nulls(std::span<const BlockId> row);

class BlockTable {
 public:
  explicit BlockTable(int32_t block_size);

  int32_t block_size() const { return block_size_; }
  // Token positions that have a slot (the KV length once their K/V are written).
  int32_t num_tokens() const { return num_tokens_; }
  // Positions whose blocks token eviction took out of the row (0 without eviction).
  int32_t num_evicted_tokens() const { return num_evicted_tokens_; }
  int32_t num_groups() const { return static_cast<int32_t>(rows_.size()); }
  // Group g's row (empty for a group the table has no row of yet).
  std::span<const BlockId> blocks(int32_t group = 0) const;
  // Leading entries of group g's row given back because no query reads them any more; they point
  // at the null block. Blocks the row still references: blocks(g).size() minus these.
  int32_t num_skipped_blocks(int32_t group = 0) const;

  // Blocks to allocate so that num_new_tokens more positions get a slot, per group. Side-effect
  // free.
  int32_t num_blocks_needed(int32_t num_new_tokens) const;

  // One-group tables: gives num_new_tokens more positions a slot, allocating from pool. Returns
  // false, and changes neither the table nor the pool, when the pool has too few free blocks.
  [[nodiscard]] bool append_slots(BlockPool& pool, int32_t num_new_tokens);

  // Slot of token position pos in group g (0 <= pos < num_tokens(); its block must be held).
  int64_t slot(int32_t pos, int32_t group = 0) const;

  // One-group tables: drops the table's reference to every block and empties it.
  void release(BlockPool& pool);

  // Hashes of the leading full blocks computed so far (a prefix of blocks()).
  std::span<const BlockHash> block_hashes() const { return block_hashes_; }
  // Leading blocks that are in the prefix cache (hit, registered, or found identical).
  int32_t num_cached_blocks() const { return num_cached_blocks_; }

 private:
  friend class KvCacheManager;
  friend class KvGroupManager;

  struct Row {
    std::vector<BlockId> blocks;
    int32_t num_skipped = 0;
  };
  // Forgets every row and the hash chain (the manager has given the blocks back).
  void clear();

  int32_t block_size_;
  int32_t num_tokens_ = 0;
  int32_t num_evicted_tokens_ = 0;
  std::vector<Row> rows_;
  std::vector<BlockHash> block_hashes_;
  int32_t num_cached_blocks_ = 0;
  // The cached block that holds block num_cached_blocks_ - 1's content (the table's own block, or
  // an identical one registered first); the parent of the next block to register. kNullBlock
  // before the first block; invalid when the chain broke (nothing further is registered).
  BlockId chain_tail_ = kNullBlock;
};

}  // namespace strata::kv

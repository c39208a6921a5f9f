#pragma once
// BlockTable: one sequence's blocks in logical order, and how many token positions have a slot.
//
// Token position p of the sequence lives in blocks()[p / block_size] at offset p % block_size;
// its slot is block_id * block_size + offset. The table owns one reference to each of its blocks
// and gives them back with release(). Growing is transactional: append_slots either allocates
// every block it needs or changes nothing. Cost: O(new blocks) per append.
//
// With prefix caching, KvCacheManager also keeps here the hash chain of the table's full blocks
// (block_hashes()) and how many leading blocks are already in the prefix cache; it is the only
// writer of those, and of a shared last block's replacement on copy-on-write.
//
// INT4 (KIVI) caches (docs/kv.md, "The residual pool"): the manager also keeps the sequence's
// residual entries -- residual-pool block ids for logical blocks residual_first_block(),
// residual_first_block() + 1, ... through the table's last block, where the newest tokens live
// at full precision. Empty without a residual pool. The table owns one reference to each
// residual block too.

#include <cstdint>
#include <span>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace strata::kv {

class BlockTable {
 public:
  explicit BlockTable(int32_t block_size);

  int32_t block_size() const { return block_size_; }
  // Token positions that have a slot (the KV length once their K/V are written).
  int32_t num_tokens() const { return num_tokens_; }
  std::span<const BlockId> blocks() const { return blocks_; }

  // Blocks to allocate so that num_new_tokens more positions get a slot. Side-effect free.
  int32_t num_blocks_needed(int32_t num_new_tokens) const;

  // Gives num_new_tokens more positions a slot, allocating from pool. Returns false, and changes
  // neither the table nor the pool, when the pool has too few free blocks.
  [[nodiscard]] bool append_slots(BlockPool& pool, int32_t num_new_tokens);

  // Slot of token position pos (0 <= pos < num_tokens()).
  int64_t slot(int32_t pos) const;

  // Residual entries: residual_blocks()[i] holds logical block residual_first_block() + i; they
  // run through the last block (residual_first_block() + residual_blocks().size() ==
  // blocks().size() whenever the manager has a residual pool).
  int32_t residual_first_block() const { return res_first_block_; }
  std::span<const BlockId> residual_blocks() const { return res_blocks_; }
  // Residual-pool slot of token position pos (its logical block must have a residual entry).
  int64_t residual_slot(int32_t pos) const;

  // Drops the table's reference to every block and empties it (residual entries: the manager
  // gives those back first).
  void release(BlockPool& pool);

  // Hashes of the leading full blocks computed so far (a prefix of blocks()).
  std::span<const BlockHash> block_hashes() const { return block_hashes_; }
  // Leading blocks that are in the prefix cache (hit, registered, or found identical).
  int32_t num_cached_blocks() const { return num_cached_blocks_; }
  // Leading entries given back because no query attends to them any more (sliding window); they
  // point at the null block. Blocks the table still references: blocks().size() minus these.
  int32_t num_skipped_blocks() const { return num_skipped_blocks_; }

 private:
  friend class KvCacheManager;

  int32_t block_size_;
  int32_t num_tokens_ = 0;
  std::vector<BlockId> blocks_;
  std::vector<BlockHash> block_hashes_;
  int32_t num_cached_blocks_ = 0;
  int32_t num_skipped_blocks_ = 0;
  // The cached block that holds block num_cached_blocks_ - 1's content (the table's own block, or
  // an identical one registered first); the parent of the next block to register. kNullBlock
  // before the first block; invalid when the chain broke (nothing further is registered).
  BlockId chain_tail_ = kNullBlock;
  // Residual entries (INT4 caches): res_blocks_[i] holds logical block res_first_block_ + i.
  int32_t res_first_block_ = 0;
  std::vector<BlockId> res_blocks_;
};

}  // namespace strata::kv

#pragma once
// BlockTable: one sequence's blocks in logical order, and how many token positions have a slot.
//
// Token position p of the sequence lives in blocks()[p / block_size] at offset p % block_size;
// its slot is block_id * block_size + offset. The table owns one reference to each of its blocks
// and gives them back with release(). Growing is transactional: append_slots either allocates
// every block it needs or changes nothing. Cost: O(new blocks) per append.

#include <cstdint>
#include <span>
#include <vector>

#include "core/ids.h"
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

  // Drops the table's reference to every block and empties it.
  void release(BlockPool& pool);

 private:
  int32_t block_size_;
  int32_t num_tokens_ = 0;
  std::vector<BlockId> blocks_;
};

}  // namespace strata::kv

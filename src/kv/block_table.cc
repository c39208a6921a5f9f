#include "kv/block_table.h"

#include "core/check.h"

namespace strata::kv {

BlockTable::BlockTable(int32_t block_size) : block_size_(block_size) {
  STRATA_CHECK(block_size > 0, "block_size must be positive");
}

int32_t BlockTable::num_blocks_needed(int32_t num_new_tokens) const {
  STRATA_CHECK(num_new_tokens >= 0, "negative token count");
  const int64_t total = static_cast<int64_t>(num_tokens_) + num_new_tokens;
  const int64_t blocks = (total + block_size_ - 1) / block_size_;
  return static_cast<int32_t>(blocks - static_cast<int64_t>(blocks_.size()));
}

bool BlockTable::append_slots(BlockPool& pool, int32_t num_new_tokens) {
  const int32_t needed = num_blocks_needed(num_new_tokens);
  if (needed > 0) {
    auto fresh = pool.allocate(needed);
    if (!fresh) return false;
    blocks_.insert(blocks_.end(), fresh->begin(), fresh->end());
  }
  num_tokens_ += num_new_tokens;
  return true;
}

int64_t BlockTable::slot(int32_t pos) const {
  STRATA_CHECK(pos >= 0 && pos < num_tokens_, "slot: position has no slot");
  const BlockId block = blocks_[static_cast<size_t>(pos / block_size_)];
  STRATA_CHECK(block != kNullBlock, "slot: position's block was given back (sliding window)");
  return static_cast<int64_t>(block.value) * block_size_ + pos % block_size_;
}

int64_t BlockTable::residual_slot(int32_t pos) const {
  STRATA_CHECK(pos >= 0 && pos < num_tokens_, "residual_slot: position has no slot");
  const int32_t idx = pos / block_size_ - res_first_block_;
  STRATA_CHECK(idx >= 0 && idx < static_cast<int32_t>(res_blocks_.size()),
               "residual_slot: the position's block has no residual entry");
  return static_cast<int64_t>(res_blocks_[static_cast<size_t>(idx)].value) * block_size_ +
         pos % block_size_;
}

void BlockTable::release(BlockPool& pool) {
  STRATA_CHECK(res_blocks_.empty(), "release: give the residual entries back first");
  pool.free(blocks_);
  blocks_.clear();
  block_hashes_.clear();
  num_tokens_ = 0;
  num_cached_blocks_ = 0;
  num_skipped_blocks_ = 0;
  chain_tail_ = kNullBlock;
  res_first_block_ = 0;
}

}  // namespace strata::kv

#include "kv/block_table.h"

#include <algorithm>

#include "core/check.h"

namespace strata::kv {

int32_t num_leading_nulls(std::span<const BlockId> row) {
  return static_cast<int32_t>(
      std::find_if(row.begin(), row.end(), [](BlockId b) { return b != kNullBlock; }) - row.begin());
}

BlockTable::BlockTable(int32_t block_size) : block_size_(block_size), rows_(1) {
  STRATA_CHECK(block_size > 0, "block_size must be positive");
}

std::span<const BlockId> BlockTable::blocks(int32_t group) const {
  STRATA_CHECK(group >= 0, "blocks: negative group");
  if (group >= num_groups()) return {};
  return rows_[static_cast<size_t>(group)].blocks;
}

int32_t BlockTable::num_skipped_blocks(int32_t group) const {
  STRATA_CHECK(group >= 0, "num_skipped_blocks: negative group");
  return group >= num_groups() ? 0 : rows_[static_cast<size_t>(group)].num_skipped;
}

int32_t BlockTable::num_blocks_needed(int32_t num_new_tokens) const {
  STRATA_CHECK(num_new_tokens >= 0, "negative token count");
  const int64_t total = static_cast<int64_t>(num_tokens_) + num_new_tokens;
  const int64_t blocks = (total + block_size_ - 1) / block_size_;
  return static_cast<int32_t>(blocks - static_cast<int64_t>(rows_[0].blocks.size()));
}

bool BlockTable::append_slots(BlockPool& pool, int32_t num_new_tokens) {
  STRATA_CHECK(num_groups() == 1,
               "append_slots: a table of several groups grows through its manager");
  const int32_t needed = num_blocks_needed(num_new_tokens);
  if (needed > 0) {
    auto fresh = pool.allocate(needed);
    if (!fresh) return false;
    rows_[0].blocks.insert(rows_[0].blocks.end(), fresh->begin(), fresh->end());
  }
  num_tokens_ += num_new_tokens;
  return true;
}

int64_t BlockTable::slot(int32_t pos, int32_t group) const {
  STRATA_CHECK(pos >= 0 && pos < num_tokens_, "slot: position has no slot");
  STRATA_CHECK(group >= 0 && group < num_groups(), "slot: the table has no row for the group");
  const std::vector<BlockId>& row = rows_[static_cast<size_t>(group)].blocks;
  const auto idx = static_cast<size_t>(pos / block_size_);
  STRATA_CHECK(idx < row.size() && row[idx] != kNullBlock,
               "slot: the group holds no block for the position (given back, or never kept)");
  return static_cast<int64_t>(row[idx].value) * block_size_ + pos % block_size_;
}

void BlockTable::release(BlockPool& pool) {
  STRATA_CHECK(num_groups() == 1, "release: a table of several groups is freed by its manager");
  pool.free(rows_[0].blocks);
  clear();
}

void BlockTable::clear() {
  rows_.assign(1, Row{});
  block_hashes_.clear();
  num_tokens_ = 0;
  num_evicted_tokens_ = 0;
  num_cached_blocks_ = 0;
  chain_tail_ = kNullBlock;
}

}  // namespace strata::kv

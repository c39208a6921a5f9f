#include "kv/paged_layout_builder.h"

#include <algorithm>
#include <span>

#include "core/check.h"

namespace strata::kv {

PagedLayoutBuilder::PagedLayoutBuilder(int32_t block_size, int32_t residual_blocks)
    : block_size_(block_size), residual_blocks_(residual_blocks) {
  STRATA_CHECK(block_size > 0, "block_size must be positive");
  STRATA_CHECK(residual_blocks >= 0, "residual_blocks must not be negative");
}

void PagedLayoutBuilder::clear() {
  kv_indptr_.assign(1, 0);
  kv_indices_.clear();
  kv_last_page_len_.clear();
  slot_mapping_.clear();
  res_indptr_.assign(1, 0);
  res_indices_.clear();
  res_first_block_.clear();
  residual_slot_mapping_.clear();
}

void PagedLayoutBuilder::add_residual(const BlockTable& table, int32_t kv_len,
                                      int32_t num_new_tokens) {
  const int32_t num_blocks = (kv_len + block_size_ - 1) / block_size_;
  const int32_t first_needed =
      std::max(0, (kv_len - num_new_tokens) / block_size_ - residual_blocks_ + 1);
  const std::span<const BlockId> entries = table.residual_blocks();
  const int32_t first = entries.empty() ? num_blocks : table.residual_first_block();
  STRATA_CHECK(first <= first_needed || first_needed >= num_blocks,
               "residual entries start after the first block the step reads at full precision");
  STRATA_CHECK(first + static_cast<int32_t>(entries.size()) >= num_blocks,
               "residual entries end before the last visible block");
  for (int32_t jb = first; jb < num_blocks; ++jb) {
    res_indices_.push_back(entries[static_cast<size_t>(jb - first)].value);
  }
  res_indptr_.push_back(static_cast<int32_t>(res_indices_.size()));
  res_first_block_.push_back(first);
  for (int32_t pos = kv_len - num_new_tokens; pos < kv_len; ++pos) {
    residual_slot_mapping_.push_back(table.residual_slot(pos));
  }
}

void PagedLayoutBuilder::add_sequence(const BlockTable& table, int32_t kv_len,
                                      int32_t num_new_tokens) {
  STRATA_CHECK(table.block_size() == block_size_, "block table of another block size");
  STRATA_CHECK(kv_len >= 0 && kv_len <= table.num_tokens(), "kv_len beyond the table's slots");
  STRATA_CHECK(num_new_tokens >= 0 && num_new_tokens <= kv_len, "new tokens beyond kv_len");
  const int32_t num_blocks = (kv_len + block_size_ - 1) / block_size_;
  for (int32_t i = 0; i < num_blocks; ++i) {
    kv_indices_.push_back(table.blocks()[static_cast<size_t>(i)].value);
  }
  kv_indptr_.push_back(static_cast<int32_t>(kv_indices_.size()));
  kv_last_page_len_.push_back(num_blocks == 0 ? 0 : kv_len - (num_blocks - 1) * block_size_);
  for (int32_t pos = kv_len - num_new_tokens; pos < kv_len; ++pos) {
    slot_mapping_.push_back(table.slot(pos));
  }
  if (residual_blocks_ > 0) add_residual(table, kv_len, num_new_tokens);
}

PagedKvLayout PagedLayoutBuilder::layout() const {
  PagedKvLayout l;
  l.kv_indptr = kv_indptr_.data();
  l.kv_indices = kv_indices_.data();
  l.kv_last_page_len = kv_last_page_len_.data();
  l.num_seqs = num_seqs();
  l.block_size = block_size_;
  if (residual_blocks_ > 0) {
    l.res_indptr = res_indptr_.data();
    l.res_indices = res_indices_.data();
    l.res_first_block = res_first_block_.data();
    l.residual_blocks = residual_blocks_;
  }
  return l;
}

}  // namespace strata::kv

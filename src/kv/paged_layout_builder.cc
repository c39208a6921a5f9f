#include "kv/paged_layout_builder.h"

#include "core/check.h"

namespace strata::kv {

PagedLayoutBuilder::PagedLayoutBuilder(int32_t block_size) : block_size_(block_size) {
  STRATA_CHECK(block_size > 0, "block_size must be positive");
}

void PagedLayoutBuilder::clear() {
  kv_indptr_.assign(1, 0);
  kv_indices_.clear();
  kv_last_page_len_.clear();
  slot_mapping_.clear();
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
}

PagedKvLayout PagedLayoutBuilder::layout() const {
  PagedKvLayout l;
  l.kv_indptr = kv_indptr_.data();
  l.kv_indices = kv_indices_.data();
  l.kv_last_page_len = kv_last_page_len_.data();
  l.num_seqs = num_seqs();
  l.block_size = block_size_;
  return l;
}

}  // namespace strata::kv

#include "kv/paged_layout_builder.h"

#include <algorithm>
#include <span>

#include "core/check.h"

namespace strata::kv {

PagedLayoutBuilder::PagedLayoutBuilder(int32_t block_size, std::vector<KvGroupSpec> groups)
    : block_size_(block_size), groups_(std::move(groups)) {
  STRATA_CHECK(block_size > 0, "block_size must be positive");
  if (groups_.empty()) groups_.push_back(KvGroupSpec{});
  arrays_.resize(groups_.size());
}

void PagedLayoutBuilder::clear() {
  for (GroupArrays& a : arrays_) {
    a.indptr.assign(1, 0);
    a.indices.clear();
    a.first_block.clear();
    a.slot_mapping.clear();
  }
  kv_last_page_len_.clear();
}

void PagedLayoutBuilder::add_sequence(const BlockTable& table, int32_t kv_len,
                                      int32_t num_new_tokens) {
  STRATA_CHECK(table.block_size() == block_size_, "block table of another block size");
  STRATA_CHECK(kv_len >= 0 && kv_len <= table.num_tokens(), "kv_len beyond the table's slots");
  STRATA_CHECK(num_new_tokens >= 0 && num_new_tokens <= kv_len, "new tokens beyond kv_len");
  const int32_t num_blocks = (kv_len + block_size_ - 1) / block_size_;
  kv_last_page_len_.push_back(num_blocks == 0 ? 0 : kv_len - (num_blocks - 1) * block_size_);
  for (int32_t g = 0; g < num_groups(); ++g) {
    GroupArrays& a = arrays_[static_cast<size_t>(g)];
    const std::span<const BlockId> row = table.blocks(g);
    STRATA_CHECK(static_cast<int32_t>(row.size()) >= num_blocks,
                 "a group's row ends before the last visible block");
    // Attention groups from the first logical block (the kernels index them by logical block and
    // start reading at a window), a newest-blocks group from the first block it holds, which must
    // not be after the first one the step reads.
    const KvGroupSpec& spec = groups_[static_cast<size_t>(g)];
    const bool from_first_held = spec.kind == KvGroupKind::kNewestBlocks;
    const int32_t first = from_first_held ? std::min(table.num_skipped_blocks(g), num_blocks) : 0;
    STRATA_CHECK(!from_first_held ||
                     first <= spec.first_needed_block(kv_len - num_new_tokens, block_size_) ||
                     first == num_blocks,
                 "a group's row starts after the first block the step reads");
    for (int32_t jb = first; jb < num_blocks; ++jb) {
      a.indices.push_back(row[static_cast<size_t>(jb)].value);
    }
    a.indptr.push_back(static_cast<int32_t>(a.indices.size()));
    a.first_block.push_back(first);
    for (int32_t pos = kv_len - num_new_tokens; pos < kv_len; ++pos) {
      a.slot_mapping.push_back(table.slot(pos, g));
    }
  }
}

PagedKvLayout PagedLayoutBuilder::layout(int32_t g) const {
  const GroupArrays& a = arrays_[static_cast<size_t>(g)];
  PagedKvLayout l;
  l.kv_indptr = a.indptr.data();
  l.kv_indices = a.indices.data();
  l.kv_last_page_len = kv_last_page_len_.data();
  l.num_seqs = num_seqs();
  l.block_size = block_size_;
  if (groups_[static_cast<size_t>(g)].kind == KvGroupKind::kNewestBlocks) {
    l.first_block = a.first_block.data();
  }
  return l;
}

}  // namespace strata::kv

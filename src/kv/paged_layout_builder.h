#pragma once
// PagedLayoutBuilder: turns a batch's block tables into one CSR paged layout per KV cache group
// (kv_group.h) and each group's slot mapping of the tokens the step writes -- the inputs every
// attention kernel reads (src/core/paged_kv.h).
//
// An attention group's layout (full attention, sliding window) covers every logical block of a
// sequence up to its KV length (kv_indptr, kv_indices with kNullBlock where a window gave a block
// back, kv_last_page_len). A newest-blocks group's starts at the sequence's first block the group
// holds (its first_block) and runs through the last visible block. layout(g) is group g's view
// (paged_kv.h): a hybrid model's windowed layers read theirs, an INT4 layer its newest-blocks
// group's beside group 0's.
//
// Owns the arrays; layout() returns a view of them that stays valid until the next add or clear.
// Reusing one builder across steps keeps the vectors' capacity: no allocation in steady state.

#include <cstdint>
#include <vector>

#include "core/paged_kv.h"
#include "kv/block_table.h"
#include "kv/kv_group.h"

namespace strata::kv {

class PagedLayoutBuilder {
 public:
  // One group's arrays: [num_seqs + 1], [entries], [num_seqs], and the slot of each token written
  // this step, in batch order.
  struct GroupArrays {
    std::vector<int32_t> indptr{0};
    std::vector<int32_t> indices;
    std::vector<int32_t> first_block;
    std::vector<int64_t> slot_mapping;
  };

  // groups: the KV cache's groups, in the KvCacheManager's order; empty = one full-attention
  // group.
  explicit PagedLayoutBuilder(int32_t block_size, std::vector<KvGroupSpec> groups = {});

  void clear();

  // Adds the next sequence of the batch: its first kv_len positions are visible to attention
  // (kv_len <= table.num_tokens()), and positions [kv_len - num_new_tokens, kv_len) are the ones
  // this step writes, appended to each group's slot mapping. Every later group's row must hold
  // the blocks from the one its kind reads at position kv_len - num_new_tokens through the last
  // visible block (KvCacheManager::allocate_slots makes them so).
  void add_sequence(const BlockTable& table, int32_t kv_len, int32_t num_new_tokens);

  int32_t num_seqs() const { return static_cast<int32_t>(kv_last_page_len_.size()); }
  int32_t num_groups() const { return static_cast<int32_t>(groups_.size()); }
  const GroupArrays& group(int32_t g) const { return arrays_[static_cast<size_t>(g)]; }
  const KvGroupSpec& group_spec(int32_t g) const { return groups_[static_cast<size_t>(g)]; }
  // Group g's layout: first_block set for a newest-blocks group, null for an attention group.
  PagedKvLayout layout(int32_t g = 0) const;
  const std::vector<int32_t>& kv_indptr() const { return arrays_[0].indptr; }
  const std::vector<int32_t>& kv_indices() const { return arrays_[0].indices; }
  const std::vector<int32_t>& kv_last_page_len() const { return kv_last_page_len_; }
  // Group 0's slot of each token written this step, in batch order: [sum of num_new_tokens].
  const std::vector<int64_t>& slot_mapping() const { return arrays_[0].slot_mapping; }

 private:
  int32_t block_size_;
  std::vector<KvGroupSpec> groups_;
  std::vector<GroupArrays> arrays_;
  std::vector<int32_t> kv_last_page_len_;
};

}  // namespace strata::kv

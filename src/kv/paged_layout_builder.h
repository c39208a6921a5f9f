#pragma once
// PagedLayoutBuilder: turns a batch's block tables into the CSR paged layout (kv_indptr,
// kv_indices, kv_last_page_len) and the slot mapping of the tokens the step writes -- the two
// inputs every attention kernel reads (src/core/paged_kv.h).
//
// Owns the arrays; layout() returns a view of them that stays valid until the next add or clear.
// Reusing one builder across steps keeps the vectors' capacity: no allocation in steady state.

#include <cstdint>
#include <vector>

#include "core/paged_kv.h"
#include "kv/block_table.h"

namespace strata::kv {

class PagedLayoutBuilder {
 public:
  explicit PagedLayoutBuilder(int32_t block_size);

  void clear();

  // Adds the next sequence of the batch: its first kv_len positions are visible to attention
  // (kv_len <= table.num_tokens()), and positions [kv_len - num_new_tokens, kv_len) are the ones
  // this step writes, appended to the slot mapping.
  void add_sequence(const BlockTable& table, int32_t kv_len, int32_t num_new_tokens);

  int32_t num_seqs() const { return static_cast<int32_t>(kv_indptr_.size()) - 1; }
  PagedKvLayout layout() const;
  const std::vector<int32_t>& kv_indptr() const { return kv_indptr_; }
  const std::vector<int32_t>& kv_indices() const { return kv_indices_; }
  const std::vector<int32_t>& kv_last_page_len() const { return kv_last_page_len_; }
  // Slot of each token written this step, in batch order: [sum of num_new_tokens].
  const std::vector<int64_t>& slot_mapping() const { return slot_mapping_; }

 private:
  int32_t block_size_;
  std::vector<int32_t> kv_indptr_{0};
  std::vector<int32_t> kv_indices_;
  std::vector<int32_t> kv_last_page_len_;
  std::vector<int64_t> slot_mapping_;
};

}  // namespace strata::kv

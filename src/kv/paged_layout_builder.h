#pragma once
// PagedLayoutBuilder: turns a batch's block tables into the CSR paged layout (kv_indptr,
// kv_indices, kv_last_page_len) and the slot mapping of the tokens the step writes -- the two
// inputs every attention kernel reads (src/core/paged_kv.h).
//
// Owns the arrays; layout() returns a view of them that stays valid until the next add or clear.
// Reusing one builder across steps keeps the vectors' capacity: no allocation in steady state.
//
// INT4 caches (residual_blocks R > 0): also the residual arrays of paged_kv.h (res_indptr,
// res_indices, res_first_block) -- each sequence's residual entries from its table's
// residual_first_block() through the last visible block -- and the residual slot mapping of the
// tokens the step writes (append_kv's residual_slot_mapping).

#include <cstdint>
#include <vector>

#include "core/paged_kv.h"
#include "kv/block_table.h"

namespace strata::kv {

class PagedLayoutBuilder {
 public:
  // residual_blocks: R of an INT4 cache's residual pool, or 0 (no residual arrays).
  explicit PagedLayoutBuilder(int32_t block_size, int32_t residual_blocks = 0);

  void clear();

  // Adds the next sequence of the batch: its first kv_len positions are visible to attention
  // (kv_len <= table.num_tokens()), and positions [kv_len - num_new_tokens, kv_len) are the ones
  // this step writes, appended to the slot mapping. With residual arrays, the table's residual
  // entries must cover the blocks from max(0, (kv_len - num_new_tokens) / block_size - R + 1)
  // through its last visible block (KvCacheManager::allocate_slots makes them so).
  void add_sequence(const BlockTable& table, int32_t kv_len, int32_t num_new_tokens);

  int32_t num_seqs() const { return static_cast<int32_t>(kv_indptr_.size()) - 1; }
  PagedKvLayout layout() const;
  const std::vector<int32_t>& kv_indptr() const { return kv_indptr_; }
  const std::vector<int32_t>& kv_indices() const { return kv_indices_; }
  const std::vector<int32_t>& kv_last_page_len() const { return kv_last_page_len_; }
  // Slot of each token written this step, in batch order: [sum of num_new_tokens].
  const std::vector<int64_t>& slot_mapping() const { return slot_mapping_; }
  // Residual arrays (empty unless residual_blocks > 0): [num_seqs + 1], [entries], [num_seqs],
  // and the residual slot of each token written this step, in batch order.
  int32_t residual_blocks() const { return residual_blocks_; }
  const std::vector<int32_t>& res_indptr() const { return res_indptr_; }
  const std::vector<int32_t>& res_indices() const { return res_indices_; }
  const std::vector<int32_t>& res_first_block() const { return res_first_block_; }
  const std::vector<int64_t>& residual_slot_mapping() const { return residual_slot_mapping_; }

 private:
  void add_residual(const BlockTable& table, int32_t kv_len, int32_t num_new_tokens);

  int32_t block_size_;
  int32_t residual_blocks_;
  std::vector<int32_t> res_indptr_{0};
  std::vector<int32_t> res_indices_;
  std::vector<int32_t> res_first_block_;
  std::vector<int64_t> residual_slot_mapping_;
  std::vector<int32_t> kv_indptr_{0};
  std::vector<int32_t> kv_indices_;
  std::vector<int32_t> kv_last_page_len_;
  std::vector<int64_t> slot_mapping_;
};

}  // namespace strata::kv

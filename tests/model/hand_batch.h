#pragma once
// HandBatch: a CPU forward pass's batch built by hand in model tests, sequence by sequence:
// new tokens at given positions over a row of blocks whose first kv_len slots the step covers
// (the new tokens in the last of them), each sequence's last row's logits wanted. Owns the
// vectors the ForwardBatch views.

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace strata::model::test_util {

class HandBatch {
 public:
  explicit HandBatch(int32_t block_size) : block_size_(block_size) {}

  // tokens at positions first_pos, first_pos + 1, ...; row: the sequence's block ids (at least
  // ceil(kv_len / block_size)); kv_len >= tokens.size(). Returns the first token's row.
  int32_t add(std::span<const int32_t> tokens, int32_t first_pos, std::span<const int32_t> row,
              int32_t kv_len) {
    const auto row0 = static_cast<int32_t>(token_ids_.size());
    const auto n = static_cast<int32_t>(tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      token_ids_.push_back(tokens[static_cast<size_t>(i)]);
      positions_.push_back(first_pos + i);
      const int32_t slot = kv_len - n + i;
      slot_mapping_.push_back(int64_t{row[static_cast<size_t>(slot / block_size_)]} * block_size_ +
                              slot % block_size_);
    }
    const int32_t num_blocks = (kv_len + block_size_ - 1) / block_size_;
    kv_indices_.insert(kv_indices_.end(), row.begin(), row.begin() + num_blocks);
    kv_indptr_.push_back(static_cast<int32_t>(kv_indices_.size()));
    last_page_len_.push_back(kv_len - (num_blocks - 1) * block_size_);
    q_indptr_.push_back(static_cast<int32_t>(token_ids_.size()));
    logits_rows_.push_back(q_indptr_.back() - 1);
    return row0;
  }

  size_t num_tokens() const { return token_ids_.size(); }
  size_t num_seqs() const { return logits_rows_.size(); }

  // Valid while this HandBatch lives and gains no sequence.
  ForwardBatch view() const {
    ForwardBatch b;
    b.token_ids = token_ids_;
    b.positions = positions_;
    b.q_indptr = q_indptr_;
    b.layout.kv_indptr = kv_indptr_.data();
    b.layout.kv_indices = kv_indices_.data();
    b.layout.kv_last_page_len = last_page_len_.data();
    b.layout.num_seqs = static_cast<int32_t>(num_seqs());
    b.layout.block_size = block_size_;
    b.slot_mapping = slot_mapping_;
    b.logits_rows = logits_rows_;
    return b;
  }

 private:
  int32_t block_size_;
  std::vector<int32_t> token_ids_, positions_, q_indptr_{0}, kv_indptr_{0}, kv_indices_,
      last_page_len_, logits_rows_;
  std::vector<int64_t> slot_mapping_;
};

}  // namespace strata::model::test_util

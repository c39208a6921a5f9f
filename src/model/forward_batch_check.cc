#include "model/forward_batch_check.h"

#include <algorithm>
#include <string>

namespace strata::model {

Status validate_step_batch(const ForwardBatch& b, int64_t vocab, int32_t num_blocks,
                           int32_t max_num_tokens, int32_t max_num_seqs, size_t logits_size,
                           size_t num_sampled) {
  const size_t num_tokens = b.token_ids.size();
  const int32_t num_seqs = b.layout.num_seqs;
  if (num_tokens == 0) return Status::InvalidArgument("forward: empty batch");
  if (num_tokens > static_cast<size_t>(max_num_tokens) || num_seqs > max_num_seqs) {
    return Status::InvalidArgument("forward: " + std::to_string(num_tokens) + " tokens in " +
                                   std::to_string(num_seqs) + " sequences exceed the GPU step's " +
                                   std::to_string(max_num_tokens) + " / " +
                                   std::to_string(max_num_seqs));
  }
  if (b.positions.size() != num_tokens || b.slot_mapping.size() != num_tokens) {
    return Status::InvalidArgument("forward: positions and slot mapping must have one entry per token");
  }
  if (num_seqs < 1 || b.q_indptr.size() != static_cast<size_t>(num_seqs) + 1 ||
      b.q_indptr.front() != 0 || static_cast<size_t>(b.q_indptr.back()) != num_tokens) {
    return Status::InvalidArgument("forward: q_indptr does not cover the batch's tokens");
  }
  if (b.layout.kv_indptr == nullptr || b.layout.kv_indptr[0] != 0) {
    return Status::InvalidArgument("forward: kv_indptr must start at 0");
  }
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t q_len = b.q_indptr[s + 1] - b.q_indptr[s];
    const int32_t first = b.layout.kv_indptr[s];
    const int32_t last = b.layout.kv_indptr[s + 1];
    if (q_len < 0 || last < first) return Status::InvalidArgument("forward: indptr not monotone");
    if (last > first && (b.layout.kv_last_page_len[s] < 1 ||
                         b.layout.kv_last_page_len[s] > b.layout.block_size)) {
      return Status::InvalidArgument("forward: last block length outside 1..block_size");
    }
    if (q_len > b.layout.kv_len(s)) {
      return Status::InvalidArgument("forward: a sequence has more new tokens than KV positions");
    }
    for (int32_t i = first; i < last; ++i) {
      if (b.layout.kv_indices[i] < 0 || b.layout.kv_indices[i] >= num_blocks) {
        return Status::OutOfRange("forward: block id " + std::to_string(b.layout.kv_indices[i]) +
                                  " outside the pool");
      }
    }
  }
  const int64_t num_slots = static_cast<int64_t>(num_blocks) * b.layout.block_size;
  for (size_t t = 0; t < num_tokens; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= vocab) {
      return Status::OutOfRange("forward: token id " + std::to_string(b.token_ids[t]) +
                                " outside the vocabulary");
    }
    if (b.positions[t] < 0) return Status::InvalidArgument("forward: negative position");
    if (b.slot_mapping[t] < -1 || b.slot_mapping[t] >= num_slots) {
      return Status::OutOfRange("forward: slot outside the pool");
    }
  }
  for (const auto& rows : {b.logits_rows, b.sample_rows}) {
    for (int32_t row : rows) {
      if (row < 0 || static_cast<size_t>(row) >= num_tokens) {
        return Status::OutOfRange("forward: logits row " + std::to_string(row) + " outside the batch");
      }
    }
  }
  if (b.sample_specs.size() != b.sample_rows.size() || num_sampled != b.sample_rows.size()) {
    return Status::InvalidArgument("forward: one sampling spec and one output per sample row");
  }
  if (b.logits_rows.size() + b.sample_rows.size() > num_tokens) {
    return Status::InvalidArgument("forward: more logits and sample rows than tokens");
  }
  if (logits_size != b.logits_rows.size() * static_cast<size_t>(vocab)) {
    return Status::InvalidArgument("forward: logits buffer must be [logits_rows, vocab]");
  }
  return Status::Ok();
}

}  // namespace strata::model

namespace strata::model {
namespace {

// One sequence's residual entries: present, in range, covering what its new tokens read.
Status check_residual_entries(const PagedKvLayout& l, int32_t s, int32_t q_len,
                              int32_t num_residual_blocks) {
  const int32_t first = l.res_first_block[s];
  const int32_t count = l.res_indptr[s + 1] - l.res_indptr[s];
  const int32_t first_new = l.kv_len(s) - q_len;
  const int32_t needed = std::max(0, first_new / l.block_size - l.residual_blocks + 1);
  if (count < 0) return Status::InvalidArgument("forward: res_indptr not monotone");
  if (first < 0 || first + count != l.num_blocks(s) || (count > 0 && first > needed)) {
    return Status::InvalidArgument(
        "forward: a sequence's residual entries do not cover the blocks from max(0, s / "
        "block_size - R + 1) through its last block");
  }
  for (int32_t i = l.res_indptr[s]; i < l.res_indptr[s + 1]; ++i) {
    if (l.res_indices[i] < 1 || l.res_indices[i] >= num_residual_blocks) {
      return Status::OutOfRange("forward: residual block id " + std::to_string(l.res_indices[i]) +
                                " outside the residual pool");
    }
  }
  return Status::Ok();
}

}  // namespace

Status validate_step_residual(const ForwardBatch& b, int32_t num_residual_blocks) {
  const PagedKvLayout& l = b.layout;
  if (l.residual_blocks < 1 || l.res_indptr == nullptr || l.res_indices == nullptr ||
      l.res_first_block == nullptr || l.res_indptr[0] != 0) {
    return Status::InvalidArgument(
        "forward: an int4 batch needs residual_blocks >= 1 and res_indptr (from 0), res_indices, "
        "res_first_block");
  }
  if (b.residual_slot_mapping.size() != b.token_ids.size()) {
    return Status::InvalidArgument("forward: the residual slot mapping needs one entry per token");
  }
  const int64_t bs = l.block_size;
  for (int32_t s = 0; s < l.num_seqs; ++s) {
    const int32_t q0 = b.q_indptr[static_cast<size_t>(s)];
    const int32_t q_len = b.q_indptr[static_cast<size_t>(s) + 1] - q0;
    STRATA_RETURN_IF_ERROR(check_residual_entries(l, s, q_len, num_residual_blocks));
    const int32_t first_new = l.kv_len(s) - q_len;
    for (int32_t i = 0; i < q_len; ++i) {
      const auto t = static_cast<size_t>(q0 + i);
      const int64_t slot = b.slot_mapping[t];
      const int64_t res = b.residual_slot_mapping[t];
      if (slot == -1 || res == -1) {
        if (slot != res) {
          return Status::InvalidArgument(
              "forward: a residual slot is -1 exactly where the slot is -1");
        }
        continue;
      }
      const int32_t jb = (first_new + i) / l.block_size;
      const int32_t entry = l.res_indptr[s] + jb - l.res_first_block[s];
      if (res < 0 || res % bs != slot % bs || jb < l.res_first_block[s] ||
          entry >= l.res_indptr[s + 1] || res / bs != l.res_indices[entry]) {
        return Status::OutOfRange(
            "forward: residual slot " + std::to_string(res) +
            " is not in the residual block of its token's position (or not at its offset)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace strata::model

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
  for (const DeviceSampleSpec& spec : b.sample_specs) {
    if (spec.mask_later && (spec.allowed != nullptr || !b.fill_masks)) {
      return Status::InvalidArgument(
          "forward: a row masked later has no mask of its own and needs the batch's fill_masks");
    }
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

Status validate_step_group(const ForwardBatch& b, int32_t g, int32_t num_blocks) {
  if (g < 1 || static_cast<size_t>(g) > b.groups.size()) {
    return Status::InvalidArgument("forward: the batch has no view of KV cache group " +
                                   std::to_string(g));
  }
  const GroupBatchView& view = b.groups[static_cast<size_t>(g) - 1];
  const PagedKvLayout& l = view.layout;
  const PagedKvLayout& l0 = b.layout;
  const bool newest = view.newest_blocks > 0;
  const std::string group = "forward: KV cache group " + std::to_string(g);
  if (view.newest_blocks < 0 || l.kv_indptr == nullptr || l.kv_indptr[0] != 0 ||
      l.kv_last_page_len == nullptr || l.num_seqs != l0.num_seqs || l.block_size != l0.block_size ||
      newest != (l.first_block != nullptr)) {
    return Status::InvalidArgument(
        group +
        ": its layout must cover the batch's sequences at its block size from kv_indptr "
        "0, with first_block exactly for a newest-blocks group");
  }
  if (view.slot_mapping.size() != b.token_ids.size()) {
    return Status::InvalidArgument(group + ": the slot mapping needs one entry per token");
  }
  const int64_t bs = l.block_size;
  const int32_t lowest = newest ? 1 : 0;  // only attention groups hold null entries
  for (int32_t s = 0; s < l.num_seqs; ++s) {
    const int32_t q0 = b.q_indptr[static_cast<size_t>(s)];
    const int32_t q_len = b.q_indptr[static_cast<size_t>(s) + 1] - q0;
    const int32_t count = l.num_blocks(s);
    const int32_t first = l.first(s);
    const int32_t first_new = l0.kv_len(s) - q_len;
    if (count < 0) return Status::InvalidArgument(group + ": kv_indptr not monotone");
    const bool covers_window =
        !newest || count == 0 ||
        first <= std::max(0, first_new / l.block_size - view.newest_blocks + 1);
    if (first < 0 || first + count != l0.num_blocks(s) || !covers_window ||
        (count > 0 && l.kv_last_page_len[s] != l0.kv_last_page_len[s])) {
      return Status::InvalidArgument(
          group +
          ": a sequence's entries must run through its last block (a newest-blocks "
          "group's from at most block max(0, first new position / block_size - R + 1))");
    }
    for (int32_t i = l.kv_indptr[s]; i < l.kv_indptr[s + 1]; ++i) {
      if (l.kv_indices[i] < lowest || l.kv_indices[i] >= num_blocks) {
        return Status::OutOfRange(group + ": block id " + std::to_string(l.kv_indices[i]) +
                                  " outside its pool");
      }
    }
    for (int32_t i = 0; i < q_len; ++i) {
      const auto t = static_cast<size_t>(q0 + i);
      const int64_t slot0 = b.slot_mapping[t];
      const int64_t slot = view.slot_mapping[t];
      if (slot0 == -1 || slot == -1) {
        if (slot0 != slot) {
          return Status::InvalidArgument(group + ": a slot is -1 exactly where group 0's is");
        }
        continue;
      }
      const int32_t jb = (first_new + i) / l.block_size;
      if (slot < 0 || slot % bs != slot0 % bs || jb < first || slot / bs != l.block_at(s, jb)) {
        return Status::OutOfRange(group + ": slot " + std::to_string(slot) +
                                  " is not in the block of its token's position (or not at its "
                                  "offset)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace strata::model

#pragma once
// The check every backend runs on a ForwardBatch before its forward pass: kernels trust the
// batch's ids, positions, block ids and slots, so a value outside its range would read or write
// another request's memory (or crash) instead of failing one step.

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "model/model.h"

namespace strata::model {

// InvalidArgument / OutOfRange for an inconsistent batch: sizes, q_indptr, a token id outside
// [0, vocab), a negative position, a block id outside [0, num_blocks), a slot outside the pool
// (or -1), more than max_num_tokens tokens or max_num_seqs sequences, a q_len above its kv_len,
// a logits buffer that is not [logits_rows, vocab].
Status validate_step_batch(const ForwardBatch& batch, int64_t vocab, int32_t num_blocks,
                           int32_t max_num_tokens, int32_t max_num_seqs, size_t logits_size,
                           size_t num_sampled);

// Group g >= 1's view of a batch that passed validate_step_batch (batch.groups[g - 1]), its pool
// holding num_blocks blocks: one slot per token inside the pool, -1 exactly where group 0's slot
// is, at the same offset in its block; a layout of the batch's sequences from kv_indptr 0,
// monotone, with block ids in [0, num_blocks) (1.. for a newest-blocks group) and group 0's
// last-block lengths. An attention group covers group 0's logical blocks (kNullBlock allowed
// before the first block the step reads); a newest-blocks group's entries (R =
// view.newest_blocks) start at or before max(0, first new position / block_size - R + 1) and run
// through the sequence's last block, and each token's slot lies in one of them. InvalidArgument /
// OutOfRange otherwise. Run validate_step_batch first.
Status validate_step_group(const ForwardBatch& batch, int32_t g, int32_t num_blocks);

}  // namespace strata::model

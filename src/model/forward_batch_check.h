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

// The residual arrays of an INT4 batch (batch.layout.residual_blocks > 0; paged_kv.h): non-null
// arrays, res_indptr from 0 and monotone, each sequence's entries starting at or before
// max(0, first new position / block_size - R + 1) and running through its last block, entries in
// [1, num_residual_blocks), one residual slot per token inside the residual pool, -1 exactly
// where the slot is -1, at the slot's offset in its block and inside one of the sequence's
// residual entries. InvalidArgument / OutOfRange otherwise. Run validate_step_batch first.
Status validate_step_residual(const ForwardBatch& batch, int32_t num_residual_blocks);

}  // namespace strata::model

#pragma once
// CudaStepInputs: the per-step index arrays of a ForwardBatch (token ids, positions, query and
// KV indptr, block ids, last-block lengths, slot mapping, logits rows; for INT4 the newest-blocks
// group's indptr, block ids, first blocks and slot mapping too) packed into one pinned host
// buffer and sent to the device in one copy, and the host-side validation that must pass first
// (model/forward_batch_check.h): the device trusts these values, so an id outside the
// vocabulary or a block outside the pool would read or write another request's memory.
//
// Owns a pinned host buffer and a device buffer that grow when a batch needs more (rare: their
// size is set for max_num_tokens and max_num_seqs and a typical block table). Not thread-safe;
// the buffers are reused by the next upload, so the caller waits for the step to finish first.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/paged_kv.h"
#include "core/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch_check.h"
#include "model/model.h"

namespace strata::model {

class CudaStepInputs {
 public:
  // Device pointers of one uploaded batch, valid until the next upload.
  struct Device {
    const int32_t* token_ids = nullptr;     // [num_tokens]
    const int32_t* positions = nullptr;     // [num_tokens]
    const int32_t* q_indptr = nullptr;      // [num_seqs + 1]
    const int64_t* slot_mapping = nullptr;  // [num_tokens]
    // INT4 batches (with a newest-blocks group): each token's slot in that group's pool; null
    // otherwise.
    const int64_t* newest_slot_mapping = nullptr;  // [num_tokens]
    // [num_logits_rows + num_sample_rows]: the logits rows, then the sample rows
    const int32_t* logits_rows = nullptr;
    // Per sample row (DeviceSampleSpec, as arrays).
    const float* temperature = nullptr;
    const int32_t* top_k = nullptr;
    const float* top_p = nullptr;
    const float* min_p = nullptr;
    const uint64_t* seeds = nullptr;
    // Structured outputs (DeviceSampleSpec::allowed, mask_later): per sample row the index of
    // its mask in masks ([*, mask_words] bitsets), or -1 for an unmasked row; null when no row is
    // masked. The masks stay in the pinned host buffer (the device reads them there, once they
    // are made: late_masks()), so masks is a host pointer, valid on the device through UVA.
    const int32_t* mask_row = nullptr;
    const uint64_t* masks = nullptr;
    int64_t mask_words = 0;
    PagedKvLayout layout;  // group 0's, device pointers
    // INT4 batches: the newest-blocks group's layout (device pointers, first_block set; its
    // kv_last_page_len is layout's array, the same values by validate_step_group) and its R.
    // Empty and 0 otherwise.
    PagedKvLayout newest_layout;
    int32_t newest_blocks = 0;
    int32_t num_tokens = 0;
    int32_t num_logits_rows = 0;
    int32_t num_sample_rows = 0;
    // The leading sequences with one query token each (decode rows, in admission order ahead
    // of any prompt chunk) go through the decode kernel; the rest through the prefill kernel.
    int32_t num_decode_seqs = 0;
    int32_t max_q_len = 0;   // over the other sequences: sizes the prefill grid
    int32_t max_kv_len = 0;  // over the decode sequences: plans the decode splits
  };

  // vocab_size: the model's, which sizes the sample rows' masks.
  static Result<CudaStepInputs> create(int32_t max_num_tokens, int32_t max_num_seqs,
                                       int32_t vocab_size);
  // Inputs for CUDA graphs: every array at a fixed device address for up to max_num_seqs
  // one-token sequences of up to max_blocks_per_seq blocks each (never reallocated).
  // newest_blocks: R of the INT4 batches to replay, whose newest-blocks group's arrays then get
  // room for R + 1 entries per sequence (KvCacheManager::allocate_slots leaves a decode step at
  // most R; the spare admits a table pruned one block late); 0 = no newest-blocks group.
  // Room for every sequence's mask too (max_num_seqs x ceil(vocab_size / 64) words), of which
  // a step copies only the masks it has.
  static Result<CudaStepInputs> create_fixed(int32_t max_num_seqs, int32_t max_blocks_per_seq,
                                             int32_t vocab_size, int32_t newest_blocks = 0);
  CudaStepInputs() = default;

  // A decode step a graph can replay: one new token per sequence, every row sampled on the device
  // (sample row i = token i), no logits rows, a newest-blocks group of create_fixed's R (none
  // exactly when that R is 0), within the fixed capacity.
  bool fits_fixed(const ForwardBatch& batch) const;
  // Packs a batch that fits_fixed() into the fixed arrays, padded to padded_seqs sequences (a
  // padded sequence has no blocks in any group and one token whose slots are -1, sampled
  // greedily), and copies it (asynchronous on stream). The pointers are the same on every call.
  // Every sequence is a decode sequence; max_kv_len is set to kv_bound, the graph's upper bound,
  // which sizes the attention plan baked into the graph.
  Result<Device> upload_fixed(const ForwardBatch& batch, int32_t padded_seqs, int32_t kv_bound,
                              cudaStream_t stream);

  // Packs and copies a validated batch (asynchronous on stream; the pinned source stays
  // untouched until the next call).
  Result<Device> upload(const ForwardBatch& batch, cudaStream_t stream);
  // Uploads copy-on-write pairs as [n, 2] (src, dst) for the block-copy kernel.
  Result<const int32_t*> upload_block_pairs(std::span<const kv::BlockCopy> copies,
                                            cudaStream_t stream);
  int64_t device_bytes() const { return static_cast<int64_t>(device_.bytes()); }
  // The last upload's mask_later rows' masks, in sample-row order: where ForwardBatch::fill_masks
  // writes them (pinned, ceil(vocab / 64) words each). Valid until the next upload.
  std::span<uint64_t* const> late_masks() const { return late_masks_; }

 private:
  Status reserve(size_t bytes);
  // Copies each `allowed` mask into its slot of masks (mask_row's index), notes each mask_later
  // row's slot in late_masks_; returns masks.
  const uint64_t* place_masks(const ForwardBatch& b, std::span<const int32_t> mask_row,
                              uint64_t* masks);

  cuda::PinnedArray<std::byte> host_;
  size_t host_bytes_ = 0;
  cuda::DeviceBuffer device_;
  int64_t mask_words_ = 0;        // ceil(vocab_size / 64)
  std::vector<uint64_t*> late_masks_;
  int32_t fixed_seqs_ = 0;        // create_fixed's capacity (0: not a fixed input set)
  int32_t fixed_blocks_per_seq_ = 0;
  int32_t fixed_newest_blocks_ = 0;  // create_fixed's R (0: no newest-blocks group)
};

}  // namespace strata::model

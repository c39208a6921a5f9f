#pragma once
// Paged decode attention: one new query token per sequence attends to the sequence's K/V in the
// paged pool (src/core/paged_kv.h). Design (docs/kernels.md):
//   - GQA-grouped: a thread block owns one (sequence, KV head, split) and computes every query
//     head of that KV head's group, so each KV byte is read once per step;
//   - 16-byte loads, several tokens' K and V in flight per thread;
//   - split-KV (FlashDecoding): when sequences x KV heads do not fill the GPU, each sequence's
//     tokens are cut into chunks whose partial results (output, log-sum-exp) the last chunk's
//     block to finish combines; the workspace holds the partials;
//   - sliding window: only the last window_left + 1 positions are attended;
//   - optional per-slot attention mass for the eviction policies.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/paged_kv.h"
#include "core/status.h"

namespace strata::cuda {

// Most KV splits the planner uses for one sequence.
inline constexpr int32_t kMaxDecodeSplits = 128;

struct DecodeAttentionParams {
  const void* q = nullptr;   // [num_seqs, num_qo_heads, head_dim], the q/o dtype
  int64_t q_seq_stride = 0;  // elements between sequences of q (>= num_qo_heads * head_dim)
  void* o = nullptr;         // [num_seqs, num_qo_heads, head_dim], the q/o dtype
  int64_t o_seq_stride = 0;  // elements between sequences of o
  PagedKvLayout layout;      // device pointers; layout.block_size == cache.block_size
  // One layer. dtype in kKvDTypes (q and o are then cache.dtype) with head_dim in
  // kAttentionHeadDims, or in kQuantizedKvDTypes (q and o are qo_dtype) with head_dim in
  // kQuantizedKvHeadDims: FP8 codes with the view's k_scale / v_scale, INT8 codes with their
  // per-token scales (docs/kv-quant.md).
  PagedKvCacheView cache;
  // INT4 (KIVI) caches only (cache.dtype == kInt4KvDType, docs/kv-quant.md "INT4"): the layer in
  // the newest-blocks group's full-precision pool (newest.cache: qo_dtype, the cache's heads,
  // head_dim and block size), that group's layout (device pointers, first_block set; its
  // kv_indptr / kv_indices / first_block are read, group 0's layout gives kv_len) and R. The
  // query at position p reads logical block jb from it iff jb > p / block_size - newest.blocks,
  // else the int4 codes. Such a launch always merges two partial results (the int4 range and the
  // newest blocks' range), so it needs a workspace for at least 2 splits. Unused for other dtypes.
  NewestBlocksView newest;
  DType qo_dtype = DType::kBF16;  // q and o over a quantized cache (kQuantizedKvQoDTypes)
  int32_t num_qo_heads = 0;  // multiple of cache.num_kv_heads; query head h reads KV head
                             //   h / (num_qo_heads / num_kv_heads)
  float sm_scale = 0.0f;     // softmax scale, usually 1 / sqrt(head_dim)
  // Sliding window: the query (at position kv_len - 1) attends positions
  // [kv_len - 1 - window_left, kv_len); -1 = the whole sequence.
  int32_t window_left = -1;
  // Host-side upper bound on any sequence's kv_len, used to plan splits; 0 = never split.
  int32_t max_kv_len = 0;
  // 0 = the planner picks; n >= 1 forces n splits (tests), capped by the workspace.
  int32_t num_splits = 0;
  // Optional [num_seqs, num_qo_heads] log-sum-exp (natural log) of the scaled scores; -inf for an
  // empty sequence. nullptr = not written.
  float* lse = nullptr;
  // Optional [num_pool_slots, num_kv_heads] float: for every attended slot, the attention
  // probabilities of the KV head's query heads, summed, are ADDED to
  // attn_mass[slot * num_kv_heads + kv_head] (H2O-style running sums: the caller zeroes it or
  // lets it accumulate over layers and steps). Slots shared by several sequences receive the sum
  // of all. Costs a second pass over K. nullptr = off. 16-bit caches only.
  float* attn_mass = nullptr;
  // Device scratch for split partials, their merge counters and the mass pass, zeroed once by
  // the caller before its first use (every launch leaves the counters zero again; launches that
  // may run at the same time need their own workspaces); decode_attention_workspace_bytes()
  // says how much allows max_splits splits. Too small (or nullptr) just means fewer splits,
  // except that attn_mass needs at least decode_attention_workspace_bytes(.., 1).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Bytes of workspace that allow up to max_splits splits (and the attention-mass pass). Zero them
// before the first launch that uses them.
size_t decode_attention_workspace_bytes(int32_t num_seqs, int32_t num_qo_heads, int32_t head_dim,
                                        int32_t max_splits);

// out[s, h] = softmax(sm_scale * q[s, h] . K[s, kv(h)]^T) V[s, kv(h)] over the attended window.
// A sequence with kv_len 0 gets a zero output. Unsupported for dtype / head_dim / block_size
// outside the sets in dispatch.h; InvalidArgument for inconsistent shapes or misaligned pointers.
// Asynchronous on stream.
Status decode_attention(const DecodeAttentionParams& params, cudaStream_t stream);

}  // namespace strata::cuda

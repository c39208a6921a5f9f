#pragma once
// Paged prefill attention: several query tokens per sequence (a prompt chunk on top of a cached
// prefix, or a single decode token in the same batch) attend causally to the sequence's K/V in
// the paged pool, whose last q_len positions are the query tokens' own (appended before the call).
// Tensor cores for Q.K^T and P.V, FP32 accumulate: wgmma for 16-bit and FP8 caches, mma.sync over
// converted INT8 / INT4 codes. docs/kernels.md.

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "core/paged_kv.h"
#include "core/status.h"

namespace strata::cuda {

// Head dims with a prefill kernel instance for 16-bit caches (256: the mma.sync kernel over the
// whole key range); quantized caches have kQuantizedKvHeadDims (dispatch.h).
inline constexpr std::array<int32_t, 3> kPrefillHeadDims = {64, 128, 256};

struct PrefillAttentionParams {
  const void* q = nullptr;     // [num_q_tokens, num_qo_heads, head_dim], the q/o dtype
  int64_t q_token_stride = 0;  // elements between query tokens (>= num_qo_heads * head_dim)
  void* o = nullptr;           // [num_q_tokens, num_qo_heads, head_dim], the q/o dtype
  int64_t o_token_stride = 0;
  // [num_seqs + 1] device: sequence s owns query rows qo_indptr[s] .. qo_indptr[s + 1); its q_len
  // must not exceed its kv_len. Query row i of s sits at position kv_len - q_len + i.
  const int32_t* qo_indptr = nullptr;
  PagedKvLayout layout;      // device pointers
  // dtype in kKvDTypes (q and o are then cache.dtype; head_dim in kPrefillHeadDims) or in
  // kQuantizedKvDTypes or INT4 (q and o are qo_dtype; head_dim in kQuantizedKvHeadDims;
  // dispatch.h).
  PagedKvCacheView cache;
  // INT4 (KIVI) caches only: the newest-blocks group's layer, layout and R, as in
  // DecodeAttentionParams (query row at position p reads logical block jb from it iff
  // jb > p / block_size - newest.blocks). The launch then runs the int4 range and the newest
  // blocks' range as two passes; the second merges into o, and `lse_workspace` holds the first's
  // log-sum-exps.
  NewestBlocksView newest;
  float* lse_workspace = nullptr;  // INT4: >= prefill_int4_workspace_floats(...) floats
  DType qo_dtype = DType::kBF16;  // q and o over a quantized cache (kQuantizedKvQoDTypes)
  int32_t num_qo_heads = 0;  // multiple of cache.num_kv_heads
  float sm_scale = 0.0f;
  int32_t window_left = -1;  // as in DecodeAttentionParams; -1 = none
  int32_t max_q_len = 0;     // host-side upper bound on any sequence's q_len (sizes the grid)
};

// Floats of PrefillAttentionParams::lse_workspace an INT4 launch needs (one per query row and
// head).
inline int64_t prefill_int4_workspace_floats(int32_t num_q_tokens, int32_t num_qo_heads) {
  return static_cast<int64_t>(num_q_tokens) * num_qo_heads;
}

// o = softmax(sm_scale * q K^T + causal mask) V per query row. Unsupported outside the supported
// sets; InvalidArgument for inconsistent shapes or misaligned pointers. Asynchronous on stream.
Status prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace strata::cuda

#pragma once
// Pieces of paged decode attention shared by the attention kernel, the attention-mass pass and
// the launcher: the kernel arguments and a sequence's extent in the paged layout. Internal (.cuh).

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda::detail {

inline constexpr int kDecodeThreads = 128;
// Fewest tokens per split: below this the merge and launch overheads outweigh the parallelism.
// 128: a short sequence alone (batch-1 decode) gets splits that the kernel's L2 prefetch covers
// whole (kPrefetchTokens, decode_attention_kernel.cuh).
inline constexpr int kMinSplitTokens = 128;
// The split planner's fixed cost of one split, in tokens of KV read (decode_attention_launch.cuh).
inline constexpr int kSplitCostTokens = 256;

struct DecodeKernelArgs {
  const void* q;  // [num_seqs, num_qo_heads, head_dim]
  int64_t q_seq_stride;
  void* o;  // [num_seqs, num_qo_heads, head_dim]
  int64_t o_seq_stride;
  float* partial_o;                 // [num_splits, num_seqs, num_qo_heads, head_dim]; null unsplit
  float* partial_lse;               // [num_splits, num_seqs, num_qo_heads], log2 units
  int32_t* split_counters;          // [num_seqs, gridDim.y] splits done; 0 between launches
  float* lse_ln;                    // [num_seqs, num_qo_heads] natural log, optional
  float* lse_log2;                  // [num_seqs, num_qo_heads] log2 units, optional
  const int32_t* kv_indptr;         // [num_seqs + 1]
  const int32_t* kv_indices;        // [nnz]
  const int32_t* kv_last_page_len;  // [num_seqs]
  const void* k_data;               // layer's K of block 0
  const void* v_data;               // layer's V of block 0
  int64_t block_stride;             // elements
  int64_t head_stride;
  int64_t token_stride;
  int32_t num_seqs;
  int32_t num_qo_heads;
  int32_t group_size;  // query heads per KV head
  int32_t q_tiles;     // query-head tiles per KV head
  int32_t block_size;
  int32_t log2_block_size;
  int32_t window_left;  // -1 = none
  int32_t num_splits;
  int32_t chunk_tokens;  // tokens per split (unused when num_splits == 1)
  float scale_log2;      // sm_scale * log2(e), times the FP8 k_scale
  float out_scale;       // 1, or the FP8 v_scale: multiplies the output
  // INT8 caches: the layer's per-token fp16 scales (PagedKvCacheView); null otherwise.
  const uint16_t* k_scales;
  const uint16_t* v_scales;
  int64_t scale_block_stride;
  int64_t scale_head_stride;
  // INT4 caches (and the newest-blocks half of their launch): the zero points (k_scales /
  // v_scales hold the scales), K's statistics stride between KV heads, and which range of the
  // sequence this launch covers (AttentionPart). kNewestPart reads the newest-blocks group's
  // pool: kv_indices is then that group's, sequence s's logical block jb at
  // newest_indptr[s] + jb - newest_first_block[s] (PagedKvLayout::block_at).
  const uint16_t* k_zeros;
  const uint16_t* v_zeros;
  int64_t k_stat_head_stride;
  int32_t part;                       // AttentionPart (kv_codes.cuh)
  int32_t newest_blocks;              // R (parts other than kWholeRange)
  const int32_t* newest_indptr;       // [num_seqs + 1] the newest-blocks group's kv_indptr
  const int32_t* newest_first_block;  // [num_seqs] its first_block
  // The partial arrays' split index of this launch's split 0, and how many splits the merge
  // waits for (num_splits, or both launches' of a two-part INT4 step together).
  int32_t split_base;
  int32_t merge_splits;
};

// Extent of one sequence in the paged layout, and the attended range [begin, kv_len).
struct SeqExtent {
  int32_t page_begin;
  int32_t num_pages;
  int32_t kv_len;
  int32_t begin;
};

__device__ __forceinline__ SeqExtent seq_extent(const int32_t* indptr, const int32_t* last_len,
                                                int32_t block_size, int32_t window_left,
                                                int32_t seq) {
  SeqExtent e;
  e.page_begin = indptr[seq];
  e.num_pages = indptr[seq + 1] - e.page_begin;
  e.kv_len = e.num_pages == 0 ? 0 : (e.num_pages - 1) * block_size + last_len[seq];
  e.begin = window_left >= 0 ? max(0, e.kv_len - 1 - window_left) : 0;
  return e;
}

}  // namespace strata::cuda::detail

#pragma once
// Host side of paged decode attention for one (dtype x head dim): the split planner, the launches
// of the attention, merge and attention-mass kernels, and run_decode_attention, which the
// instance files (instances/decode_<dtype>_hd<dim>.cu) instantiate.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention_mass.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_attention_impl.h"
#include "kernels/cuda/decode_attention_kernel.cuh"
#include "kernels/cuda/decode_merge.cuh"

namespace strata::cuda::detail {

// Head dim 96 spreads a row over 4 lanes (3 vectors each) and 256 over 16 (2 each): their tiles
// stop at 4 query heads so that q and the accumulators stay in registers.
template <int kHeadDim, typename F>
Status dispatch_group_tile(int32_t group_size, F&& f) {
  if (group_size <= 1) return f.template operator()<1>();
  if (group_size <= 2) return f.template operator()<2>();
  if constexpr (kHeadDim == 96 || kHeadDim > 128) {
    return f.template operator()<4>();
  } else {
    if (group_size <= 4) return f.template operator()<4>();
    return f.template operator()<8>();
  }
}

inline int32_t floor_log2(int32_t v) {
  int32_t r = 0;
  while ((1 << (r + 1)) <= v) ++r;
  return r;
}

// Number of splits for one launch. Measured on an H200 GPU (docs/kernels.md): bandwidth saturates
// at about two resident blocks per SM, and every extra split adds partial outputs to write and
// merge, so the planner splits only grids smaller than two blocks per SM, up to about that size;
// no split is shorter than kMinSplitTokens and the workspace bounds the count.
inline int32_t plan_num_splits(const DecodeAttentionParams& p, int64_t unsplit_blocks,
                               int32_t effective_len) {
  if (effective_len <= 0) return 1;
  int64_t splits = p.num_splits;
  if (splits <= 0) {
    int device = 0;
    int num_sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return 1;
    }
    const int64_t target_blocks = 2 * static_cast<int64_t>(num_sms);
    splits = std::max<int64_t>(1, (target_blocks + unsplit_blocks / 2) / unsplit_blocks);
    splits = std::min<int64_t>(splits, ceil_div(effective_len, kMinSplitTokens));
  }
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(kMaxDecodeSplits, effective_len));
  const int32_t head_dim = p.cache.head_dim;
  while (splits > 1 &&
         decode_workspace_layout(p.layout.num_seqs, p.num_qo_heads, head_dim,
                                 static_cast<int32_t>(splits))
                 .total_bytes > p.workspace_bytes) {
    --splits;
  }
  return static_cast<int32_t>(splits);
}

template <DType kDType, int kHeadDim, int kGroupTile>
Status launch_decode(const DecodeAttentionParams& p, cudaStream_t stream) {
  auto* kernel = decode_attention_kernel<kDType, kHeadDim, kGroupTile>;
  constexpr size_t kMergeBytes =
      sizeof(float) * (kDecodeThreads / 32 - 1) * kGroupTile * kHeadDim;
  constexpr size_t kSmemBytes =
      std::max(DecodeShape<kHeadDim>::kPipelineBytes, kMergeBytes);
  // Once per instance: allow the dynamic shared memory beyond the default 48 KiB.
  static const cudaError_t configured = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  STRATA_CUDA_CHECK(configured);
  const PagedKvCacheView& c = p.cache;
  const int32_t num_seqs = p.layout.num_seqs;
  const int32_t group_size = p.num_qo_heads / c.num_kv_heads;
  const int32_t q_tiles = static_cast<int32_t>(ceil_div(group_size, kGroupTile));
  const int32_t effective_len =
      p.window_left >= 0 ? std::min(p.max_kv_len, p.window_left + 1) : p.max_kv_len;
  const int64_t unsplit_blocks = static_cast<int64_t>(num_seqs) * c.num_kv_heads * q_tiles;
  int32_t num_splits = plan_num_splits(p, unsplit_blocks, effective_len);
  const int32_t chunk = num_splits > 1 ? static_cast<int32_t>(ceil_div(effective_len, num_splits)) : 0;
  if (num_splits > 1) num_splits = static_cast<int32_t>(ceil_div(effective_len, chunk));

  const DecodeWorkspaceLayout ws = decode_workspace_layout(num_seqs, p.num_qo_heads, kHeadDim, num_splits);
  char* ws_base = static_cast<char*>(p.workspace);
  float* lse_log2 = p.attn_mass != nullptr
                        ? reinterpret_cast<float*>(ws_base + ws.lse_log2_offset)
                        : nullptr;

  DecodeKernelArgs a{};
  a.q = p.q;
  a.q_seq_stride = p.q_seq_stride;
  a.o = p.o;
  a.o_seq_stride = p.o_seq_stride;
  if (num_splits > 1) {
    a.partial_o = reinterpret_cast<float*>(ws_base + ws.partial_o_offset);
    a.partial_lse = reinterpret_cast<float*>(ws_base + ws.partial_lse_offset);
  } else {
    a.lse_ln = p.lse;
    a.lse_log2 = lse_log2;
  }
  a.kv_indptr = p.layout.kv_indptr;
  a.kv_indices = p.layout.kv_indices;
  a.kv_last_page_len = p.layout.kv_last_page_len;
  a.k_data = c.k_data;
  a.v_data = c.v_data;
  a.block_stride = c.block_stride;
  a.head_stride = c.head_stride;
  a.token_stride = c.token_stride;
  a.num_seqs = num_seqs;
  a.num_qo_heads = p.num_qo_heads;
  a.group_size = group_size;
  a.q_tiles = q_tiles;
  a.block_size = c.block_size;
  a.log2_block_size = floor_log2(c.block_size);
  a.window_left = p.window_left;
  a.num_splits = num_splits;
  a.chunk_tokens = chunk;
  a.scale_log2 = p.sm_scale * 1.4426950408889634f;

  const dim3 grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(c.num_kv_heads * q_tiles),
                  static_cast<unsigned>(num_splits));
  kernel<<<grid, kDecodeThreads, kSmemBytes, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();

  if (num_splits > 1) {
    DecodeMergeArgs m{};
    m.partial_o = a.partial_o;
    m.partial_lse = a.partial_lse;
    m.o = p.o;
    m.o_seq_stride = p.o_seq_stride;
    m.lse_ln = p.lse;
    m.lse_log2 = lse_log2;
    m.num_seqs = num_seqs;
    m.num_qo_heads = p.num_qo_heads;
    m.head_dim = kHeadDim;
    m.num_splits = num_splits;
    decode_merge_kernel<kDType><<<dim3(num_seqs, p.num_qo_heads), kMergeThreads, 0, stream>>>(m);
    STRATA_CUDA_CHECK_LAUNCH();
  }

  if (p.attn_mass != nullptr) {
    AttentionMassArgs ma{};
    ma.q = p.q;
    ma.q_seq_stride = p.q_seq_stride;
    ma.lse_log2 = lse_log2;
    ma.mass = p.attn_mass;
    ma.kv_indptr = p.layout.kv_indptr;
    ma.kv_indices = p.layout.kv_indices;
    ma.kv_last_page_len = p.layout.kv_last_page_len;
    ma.k_data = c.k_data;
    ma.block_stride = c.block_stride;
    ma.head_stride = c.head_stride;
    ma.token_stride = c.token_stride;
    ma.num_kv_heads = c.num_kv_heads;
    ma.num_qo_heads = p.num_qo_heads;
    ma.group_size = group_size;
    ma.block_size = c.block_size;
    ma.log2_block_size = a.log2_block_size;
    ma.window_left = p.window_left;
    int64_t chunks = std::clamp<int64_t>(ceil_div(std::max(effective_len, 1), kMassChunkTokens), 1, 65535);
    ma.chunk_tokens = static_cast<int32_t>(ceil_div(std::max(effective_len, 1), chunks));
    chunks = ceil_div(std::max(effective_len, 1), ma.chunk_tokens);
    ma.scale_log2 = a.scale_log2;
    const dim3 mgrid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(c.num_kv_heads),
                     static_cast<unsigned>(chunks));
    attention_mass_kernel<kDType, kHeadDim><<<mgrid, kDecodeThreads, 0, stream>>>(ma);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  return Status::Ok();
}

template <DType kDType, int32_t kHeadDim>
Status run_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream) {
  return dispatch_group_tile<kHeadDim>(params.num_qo_heads / params.cache.num_kv_heads,
                             [&]<int kGroupTile>() {
                               return launch_decode<kDType, kHeadDim, kGroupTile>(params, stream);
                             });
}

}  // namespace strata::cuda::detail

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

namespace strata::cuda::detail {

inline int32_t floor_log2(int32_t v) {
  int32_t r = 0;
  while ((1 << (r + 1)) <= v) ++r;
  return r;
}

// Number of splits for one launch. Bandwidth saturates once every SM holds as many blocks as fit
// (blocks_per_sm, from the occupancy calculator: a wave). The planner models a launch's time as
// waves x the longest block, ceil(blocks * s / wave) * (len / s + kSplitCostTokens), and takes the
// split count s that minimizes it: more splits fill the last wave better, and each costs a fixed
// start (Q, the pipeline filling up, the partial output and its merge), counted in tokens. Grids
// of four waves or more are not split. No split is shorter than kMinSplitTokens and the workspace
// bounds the count. (With three blocks per SM, 512 unsplit blocks are 1.29 waves; three splits
// make 3.88.)
inline int32_t plan_num_splits(const DecodeAttentionParams& p, int64_t unsplit_blocks,
                               int32_t effective_len, int blocks_per_sm) {
  if (effective_len <= 0) return 1;
  int64_t splits = p.num_splits;
  if (splits <= 0) {
    int device = 0;
    int num_sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return 1;
    }
    const int64_t wave = static_cast<int64_t>(std::max(blocks_per_sm, 1)) * num_sms;
    const int64_t most =
        std::min<int64_t>(kMaxDecodeSplits, ceil_div(effective_len, kMinSplitTokens));
    splits = 1;
    if (unsplit_blocks < 4 * wave) {
      int64_t best_cost = INT64_MAX;
      for (int64_t s = 1; s <= most; ++s) {
        const int64_t cost = ceil_div(unsplit_blocks * s, wave) *
                             (ceil_div(effective_len, s) + kSplitCostTokens);
        if (cost < best_cost) {
          best_cost = cost;
          splits = s;
        }
      }
    }
  }
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(kMaxDecodeSplits, effective_len));
  if (unsplit_blocks > kSplitCounterCapacity) splits = 1;  // one merge counter per block tile
  const int32_t head_dim = p.cache.head_dim;
  while (splits > 1 && decode_workspace_layout(p.layout.num_seqs, p.num_qo_heads, head_dim,
                                               static_cast<int32_t>(splits))
                               .total_bytes > p.workspace_bytes) {
    --splits;
  }
  return static_cast<int32_t>(splits);
}

// Kernel arguments from the launch parameters; the split fields are filled by the caller.
inline DecodeKernelArgs decode_args(const DecodeAttentionParams& p, int32_t q_tiles) {
  const PagedKvCacheView& c = p.cache;
  DecodeKernelArgs a{};
  a.q = p.q;
  a.q_seq_stride = p.q_seq_stride;
  a.o = p.o;
  a.o_seq_stride = p.o_seq_stride;
  a.kv_indptr = p.layout.kv_indptr;
  a.kv_indices = p.layout.kv_indices;
  a.kv_last_page_len = p.layout.kv_last_page_len;
  a.k_data = c.k_data;
  a.v_data = c.v_data;
  a.block_stride = c.block_stride;
  a.head_stride = c.head_stride;
  a.token_stride = c.token_stride;
  a.num_seqs = p.layout.num_seqs;
  a.num_qo_heads = p.num_qo_heads;
  a.group_size = p.num_qo_heads / c.num_kv_heads;
  a.q_tiles = q_tiles;
  a.block_size = c.block_size;
  a.log2_block_size = floor_log2(c.block_size);
  a.window_left = p.window_left;
  set_kv_scale_args(a, c, p.sm_scale);
  return a;
}

inline int32_t effective_kv_len(const DecodeAttentionParams& p) {
  return p.window_left >= 0 ? std::min(p.max_kv_len, p.window_left + 1) : p.max_kv_len;
}

// Points the kernel at the workspace's partials (split) or the caller's outputs (unsplit).
inline float* bind_outputs(const DecodeAttentionParams& p, DecodeKernelArgs& a) {
  const DecodeWorkspaceLayout ws =
      decode_workspace_layout(a.num_seqs, p.num_qo_heads, p.cache.head_dim, a.num_splits);
  char* ws_base = static_cast<char*>(p.workspace);
  float* lse_log2 =
      p.attn_mass != nullptr ? reinterpret_cast<float*>(ws_base + ws.lse_log2_offset) : nullptr;
  if (a.num_splits > 1) {
    a.partial_o = reinterpret_cast<float*>(ws_base + ws.partial_o_offset);
    a.partial_lse = reinterpret_cast<float*>(ws_base + ws.partial_lse_offset);
    a.split_counters = reinterpret_cast<int32_t*>(ws_base);
  }
  a.lse_ln = p.lse;
  a.lse_log2 = lse_log2;
  return lse_log2;
}

// The attention-mass pass over a 16-bit cache (after the attention kernel wrote lse_log2).
template <DType kDType, int kHeadDim>
Status finish_attention_mass(const DecodeAttentionParams& p, const DecodeKernelArgs& a,
                             float* lse_log2, cudaStream_t stream) {
  const PagedKvCacheView& c = p.cache;
  if (p.attn_mass == nullptr) return Status::Ok();
  const int32_t effective_len = std::max(effective_kv_len(p), 1);
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
  ma.group_size = a.group_size;
  ma.block_size = c.block_size;
  ma.log2_block_size = a.log2_block_size;
  ma.window_left = p.window_left;
  int64_t chunks = std::clamp<int64_t>(ceil_div(effective_len, kMassChunkTokens), 1, 65535);
  ma.chunk_tokens = static_cast<int32_t>(ceil_div(effective_len, chunks));
  chunks = ceil_div(effective_len, ma.chunk_tokens);
  ma.scale_log2 = a.scale_log2;
  const dim3 grid(static_cast<unsigned>(a.num_seqs), static_cast<unsigned>(c.num_kv_heads),
                  static_cast<unsigned>(chunks));
  attention_mass_kernel<kDType, kHeadDim><<<grid, kDecodeThreads, 0, stream>>>(ma);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

// After the attention kernel (which merges its own splits): the attention-mass pass, when asked.
template <DType kKvDType, int kHeadDim>
Status finish_decode(const DecodeAttentionParams& p, const DecodeKernelArgs& a, float* lse_log2,
                     cudaStream_t stream) {
  if constexpr (is_quantized_kv(kKvDType)) {
    return Status::Ok();  // the launcher refuses attn_mass on quantized caches
  } else {
    return finish_attention_mass<kKvDType, kHeadDim>(p, a, lse_log2, stream);
  }
}

// Blocks of `kernel` resident per SM with smem_bytes of dynamic shared memory (0 if unknown).
template <typename Kernel>
int resident_blocks(Kernel kernel, size_t smem_bytes) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kDecodeThreads, smem_bytes) !=
      cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return n;
}

template <DType kQDType, DType kKvDType, int kHeadDim, int kRows>
Status launch_decode(const DecodeAttentionParams& p, cudaStream_t stream) {
  using Shape = DecodeShape<kKvDType, kHeadDim>;
  auto* kernel = decode_attention_kernel<kQDType, kKvDType, kHeadDim, kRows>;
  constexpr size_t kSmemBytes = Shape::kSmemBytes;
  // Once per instance: allow the dynamic shared memory beyond the default 48 KiB.
  static const cudaError_t configured = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  STRATA_CUDA_CHECK(configured);
  static const int blocks_per_sm = resident_blocks(kernel, kSmemBytes);
  const int32_t group_size = p.num_qo_heads / p.cache.num_kv_heads;
  const int32_t q_tiles = static_cast<int32_t>(ceil_div(group_size, kRows));
  DecodeKernelArgs a = decode_args(p, q_tiles);
  const int32_t effective_len = effective_kv_len(p);
  const int64_t unsplit_blocks = static_cast<int64_t>(a.num_seqs) * p.cache.num_kv_heads * q_tiles;
  a.num_splits = plan_num_splits(p, unsplit_blocks, effective_len, blocks_per_sm);
  a.chunk_tokens = 0;
  if (a.num_splits > 1) {
    // Splits are whole 16-token tiles from the window start rounded down to 16.
    constexpr int kT = Shape::kTileTokens;
    const int64_t tiles = ceil_div(effective_len + kT - 1, kT);
    const int64_t chunk_tiles = ceil_div(tiles, a.num_splits);
    a.num_splits = static_cast<int32_t>(ceil_div(tiles, chunk_tiles));
    a.chunk_tokens = static_cast<int32_t>(chunk_tiles * kT);
  }
  float* lse_log2 = bind_outputs(p, a);
  const dim3 grid(static_cast<unsigned>(a.num_seqs),
                  static_cast<unsigned>(p.cache.num_kv_heads * q_tiles),
                  static_cast<unsigned>(a.num_splits));
  launch_pdl(kernel, grid, dim3(kDecodeThreads), kSmemBytes, stream, a);
  STRATA_CUDA_CHECK_LAUNCH();
  return finish_decode<kKvDType, kHeadDim>(p, a, lse_log2, stream);
}

template <DType kQDType, DType kKvDType, int32_t kHeadDim>
Status run_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream) {
  // Groups of up to 8 query heads use the lower half of the m16 tiles only.
  if (params.num_qo_heads / params.cache.num_kv_heads <= 8) {
    return launch_decode<kQDType, kKvDType, kHeadDim, 8>(params, stream);
  }
  return launch_decode<kQDType, kKvDType, kHeadDim, 16>(params, stream);
}

}  // namespace strata::cuda::detail

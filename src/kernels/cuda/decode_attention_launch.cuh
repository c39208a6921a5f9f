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

// Points the kernel at the workspace's partials (merge_splits > 1: this launch's splits among
// them from split_base) or the caller's outputs (unsplit).
inline float* bind_outputs(const DecodeAttentionParams& p, DecodeKernelArgs& a) {
  const DecodeWorkspaceLayout ws =
      decode_workspace_layout(a.num_seqs, p.num_qo_heads, p.cache.head_dim, a.merge_splits);
  char* ws_base = static_cast<char*>(p.workspace);
  float* lse_log2 =
      p.attn_mass != nullptr ? reinterpret_cast<float*>(ws_base + ws.lse_log2_offset) : nullptr;
  if (a.merge_splits > 1) {
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
  if constexpr (is_quantized_kv(kKvDType) || kKvDType == DType::kI4) {
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

// One decode kernel instance, configured once: its dynamic shared memory beyond the default
// 48 KiB allowed, and its blocks per SM.
template <DType kQDType, DType kKvDType, int kHeadDim, int kRows>
struct DecodeInstance {
  using Shape = DecodeShape<kKvDType, kHeadDim>;
  static constexpr auto* kKernel = decode_attention_kernel<kQDType, kKvDType, kHeadDim, kRows>;
  static Result<int> blocks_per_sm() {
    static const cudaError_t configured =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(Shape::kSmemBytes));
    STRATA_CUDA_CHECK(configured);
    static const int blocks = resident_blocks(kKernel, Shape::kSmemBytes);
    return blocks;
  }
  static Status launch(const DecodeKernelArgs& a, int32_t num_kv_heads, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(a.num_seqs),
                    static_cast<unsigned>(num_kv_heads * a.q_tiles),
                    static_cast<unsigned>(a.num_splits));
    const cudaError_t err =
        launch_pdl(kKernel, grid, dim3(kDecodeThreads), Shape::kSmemBytes, stream, a);
    if (err != cudaSuccess) {
      return cuda_error_status(err,
                               a.part == kNewestPart ? "decode launch (int4 newest part)"
                               : a.part == kInt4Part ? "decode launch (int4 part)"
                                                     : "decode launch",
                               __FILE__, __LINE__);
    }
    STRATA_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }
};

// Cuts [window start rounded down to 16, end) into a.num_splits chunks of whole 16-token tiles
// (the count may shrink so that none is empty).
inline void set_chunks(DecodeKernelArgs& a, int32_t effective_len) {
  a.chunk_tokens = 0;
  if (a.num_splits > 1) {
    constexpr int kT = 16;  // DecodeShape::kTileTokens
    const int64_t tiles = ceil_div(effective_len + kT - 1, kT);
    const int64_t chunk_tiles = ceil_div(tiles, a.num_splits);
    a.num_splits = static_cast<int32_t>(ceil_div(tiles, chunk_tiles));
    a.chunk_tokens = static_cast<int32_t>(chunk_tiles * kT);
  }
}

template <DType kQDType, DType kKvDType, int kHeadDim, int kRows>
Status launch_decode(const DecodeAttentionParams& p, cudaStream_t stream) {
  using Instance = DecodeInstance<kQDType, kKvDType, kHeadDim, kRows>;
  static_assert(DecodeShape<kKvDType, kHeadDim>::kTileTokens == 16);
  const Result<int> blocks_per_sm = Instance::blocks_per_sm();
  if (!blocks_per_sm.ok()) return blocks_per_sm.status();
  const int32_t group_size = p.num_qo_heads / p.cache.num_kv_heads;
  const int32_t q_tiles = static_cast<int32_t>(ceil_div(group_size, kRows));
  DecodeKernelArgs a = decode_args(p, q_tiles);
  const int32_t effective_len = effective_kv_len(p);
  const int64_t unsplit_blocks = static_cast<int64_t>(a.num_seqs) * p.cache.num_kv_heads * q_tiles;
  a.num_splits = plan_num_splits(p, unsplit_blocks, effective_len, blocks_per_sm.value());
  set_chunks(a, effective_len);
  a.merge_splits = a.num_splits;
  float* lse_log2 = bind_outputs(p, a);
  STRATA_RETURN_IF_ERROR(Instance::launch(a, p.cache.num_kv_heads, stream));
  return finish_decode<kKvDType, kHeadDim>(p, a, lse_log2, stream);
}

// The newest-blocks half of an INT4 launch: the 16-bit kernel over the newest-blocks group's
// pool. Planned and launched by these two, instantiated only in the 16-bit instance files
// (instances/decode_*.cu) and declared extern in the INT4 ones, so that each kernel is compiled
// into one translation unit: a template kernel compiled into two is two device functions, and
// the shared-memory attribute set on one need not be the one a launch uses.
template <DType kQDType, int kHeadDim, int kRows>
Result<DecodeKernelArgs> plan_newest_part(const DecodeAttentionParams& rp, int32_t q_tiles,
                                          int64_t unsplit_blocks, int32_t newest_len) {
  const Result<int> blocks = DecodeInstance<kQDType, kQDType, kHeadDim, kRows>::blocks_per_sm();
  if (!blocks.ok()) return blocks.status();
  DecodeKernelArgs b = decode_args(rp, q_tiles);
  b.num_splits = plan_num_splits(rp, unsplit_blocks, newest_len, blocks.value());
  set_chunks(b, newest_len);
  return b;
}

template <DType kQDType, int kHeadDim, int kRows>
Status launch_newest_part(const DecodeKernelArgs& b, int32_t num_kv_heads, cudaStream_t stream) {
  return DecodeInstance<kQDType, kQDType, kHeadDim, kRows>::launch(b, num_kv_heads, stream);
}

// The explicit instantiations (prefix `template`) or declarations (`extern template`) of the
// newest-blocks half for one (q dtype, head dim, rows).
#define STRATA_DECODE_NEWEST_PART(prefix, kQ, kHeadDim, kRows)                            \
  prefix Result<DecodeKernelArgs> plan_newest_part<kQ, kHeadDim, kRows>(                  \
      const DecodeAttentionParams&, int32_t, int64_t, int32_t);                           \
  prefix Status launch_newest_part<kQ, kHeadDim, kRows>(const DecodeKernelArgs&, int32_t, \
                                                        cudaStream_t)

// INT4 (KIVI): the int4 range through the INT4 instance, then the newest blocks' window through
// the 16-bit instance over the newest-blocks group's pool; the two launches' splits share the
// partial arrays and one merge counter, so the newest part's last block merges both.
template <DType kQDType, int kHeadDim, int kRows>
Status launch_decode_int4(const DecodeAttentionParams& p, cudaStream_t stream) {
  using Int4 = DecodeInstance<kQDType, DType::kI4, kHeadDim, kRows>;
  const Result<int> int4_blocks = Int4::blocks_per_sm();
  if (!int4_blocks.ok()) return int4_blocks.status();
  const int32_t group_size = p.num_qo_heads / p.cache.num_kv_heads;
  const int32_t q_tiles = static_cast<int32_t>(ceil_div(group_size, kRows));
  const int64_t unsplit_blocks =
      static_cast<int64_t>(p.layout.num_seqs) * p.cache.num_kv_heads * q_tiles;
  const int32_t window = (p.newest.blocks + 1) * p.cache.block_size;
  const int32_t effective_len = effective_kv_len(p);

  // The newest blocks' window: 16-bit blocks by the newest-blocks group's tables (its
  // kv_indices here, its kv_indptr and first_block below; kv_len still from group 0's layout).
  DecodeAttentionParams rp = p;
  rp.cache = p.newest.cache;
  rp.layout.kv_indices = p.newest.layout.kv_indices;
  rp.num_splits = 0;
  Result<DecodeKernelArgs> planned = plan_newest_part<kQDType, kHeadDim, kRows>(
      rp, q_tiles, unsplit_blocks, std::min(effective_len, window));
  if (!planned.ok()) return planned.status();
  DecodeKernelArgs b = planned.value();
  DecodeKernelArgs a = decode_args(p, q_tiles);  // the int4 range
  a.num_splits = plan_num_splits(p, unsplit_blocks, effective_len, int4_blocks.value());
  set_chunks(a, effective_len);
  // Both launches' splits in one workspace.
  while (a.num_splits > 1 &&
         (a.num_splits + b.num_splits > kMaxDecodeSplits ||
          decode_workspace_layout(p.layout.num_seqs, p.num_qo_heads, kHeadDim,
                                  a.num_splits + b.num_splits)
                  .total_bytes > p.workspace_bytes)) {
    --a.num_splits;
    set_chunks(a, effective_len);
  }
  const int32_t total = a.num_splits + b.num_splits;
  if (p.workspace == nullptr ||
      decode_workspace_layout(p.layout.num_seqs, p.num_qo_heads, kHeadDim, total).total_bytes >
          p.workspace_bytes) {
    return Status::InvalidArgument(
        "decode attention over an int4 cache needs decode_attention_workspace_bytes(.., 2)");
  }
  for (DecodeKernelArgs* x : {&a, &b}) {
    x->newest_blocks = p.newest.blocks;
    x->newest_indptr = p.newest.layout.kv_indptr;
    x->newest_first_block = p.newest.layout.first_block;
    x->merge_splits = total;
  }
  a.part = kInt4Part;
  b.part = kNewestPart;
  b.split_base = a.num_splits;
  bind_outputs(p, a);
  bind_outputs(p, b);
  STRATA_RETURN_IF_ERROR(Int4::launch(a, p.cache.num_kv_heads, stream));
  return launch_newest_part<kQDType, kHeadDim, kRows>(b, p.cache.num_kv_heads, stream);
}

template <DType kQDType, DType kKvDType, int32_t kHeadDim>
Status run_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream) {
  // Groups of up to 8 query heads use the lower half of the m16 tiles only.
  if constexpr (kKvDType == DType::kI4) {
    if (params.num_qo_heads / params.cache.num_kv_heads <= 8) {
      return launch_decode_int4<kQDType, kHeadDim, 8>(params, stream);
    }
    return launch_decode_int4<kQDType, kHeadDim, 16>(params, stream);
  } else {
    if (params.num_qo_heads / params.cache.num_kv_heads <= 8) {
      return launch_decode<kQDType, kKvDType, kHeadDim, 8>(params, stream);
    }
    return launch_decode<kQDType, kKvDType, kHeadDim, 16>(params, stream);
  }
}

}  // namespace strata::cuda::detail

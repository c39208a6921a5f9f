// moe_permute(), moe_gather(), moe_combine() (moe.h): the grouping of a batch's (token, slot)
// pairs by expert, the gather of token rows into the expert-sorted buffer, and the weighted sum
// back to tokens. None of them lets an atomic decide an order, so the rows, and the sums, are the
// same on every run.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

// 1024 threads: a chunk of 1024 pairs per round of barriers (16 rounds for 2048 tokens x top-8).
constexpr int kPermuteThreads = 1024;
constexpr int kPermuteWarps = kPermuteThreads / 32;
constexpr int kScanPerThread = kMoeMaxExperts / kPermuteThreads;
constexpr unsigned kFull = 0xffffffffu;

// In-place exclusive scan of v[0, n) (n <= kMoeMaxExperts) by the whole block; returns the total.
// warp_tot holds kPermuteWarps ints.
__device__ int32_t block_exclusive_scan(int32_t* v, int32_t n, int32_t* warp_tot) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int32_t local[kScanPerThread];
  int32_t sum = 0;
#pragma unroll
  for (int i = 0; i < kScanPerThread; ++i) {
    const int32_t idx = tid * kScanPerThread + i;
    local[i] = idx < n ? v[idx] : 0;
    sum += local[i];
  }
  int32_t incl = sum;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int32_t o = __shfl_up_sync(kFull, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  int32_t before = incl - sum;
  int32_t total = 0;
  for (int w = 0; w < kPermuteWarps; ++w) {
    if (w < warp) before += warp_tot[w];
    total += warp_tot[w];
  }
#pragma unroll
  for (int i = 0; i < kScanPerThread; ++i) {
    const int32_t idx = tid * kScanPerThread + i;
    if (idx < n) v[idx] = before;
    before += local[i];
  }
  __syncthreads();
  return total;
}

struct PermuteArgs {
  const int32_t* experts;
  int32_t num_pairs, num_experts, tile_rows, max_tiles;
  int32_t* expert_offsets;
  int32_t* row_of;
  int32_t* token_of;
  int32_t top_k;
  int32_t* tile_expert;
  int32_t* tile_row;
  int32_t* num_tiles;
};

// One block. Shared: offsets [E], tile offsets [E], next [E] (the next free row of each expert),
// per-warp counts of the current chunk [warps][E], warp totals: 143 KiB at 1024 experts, 18 KiB
// at 128.
__global__ void __launch_bounds__(kPermuteThreads)
    permute_kernel(const __grid_constant__ PermuteArgs a) {
  extern __shared__ __align__(16) int32_t sm[];
  detail::pdl_launch_dependents();
  detail::pdl_wait();
  const int32_t n = a.num_experts;
  int32_t* offsets = sm;
  int32_t* tiles = offsets + n;
  int32_t* next = tiles + n;
  int32_t* chunk_count = next + n;  // [kPermuteWarps][n]
  int32_t* warp_tot = chunk_count + kPermuteWarps * n;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int32_t e = tid; e < n; e += kPermuteThreads) offsets[e] = 0;
  for (int32_t i = tid; i < kPermuteWarps * n; i += kPermuteThreads) chunk_count[i] = 0;
  __syncthreads();
  for (int32_t i = tid; i < a.num_pairs; i += kPermuteThreads) atomicAdd(&offsets[a.experts[i]], 1);
  __syncthreads();
  for (int32_t e = tid; e < n; e += kPermuteThreads) {
    tiles[e] = (offsets[e] + a.tile_rows - 1) / a.tile_rows;
  }
  __syncthreads();
  const int32_t num_rows = block_exclusive_scan(offsets, n, warp_tot);
  const int32_t num_tiles = block_exclusive_scan(tiles, n, warp_tot);
  for (int32_t e = tid; e < n; e += kPermuteThreads) {
    a.expert_offsets[e] = offsets[e];
    next[e] = offsets[e];
    const int32_t end = e + 1 < n ? offsets[e + 1] : num_rows;
    for (int32_t r = offsets[e], i = tiles[e]; r < end; r += a.tile_rows, ++i) {
      a.tile_expert[i] = e;
      a.tile_row[i] = r;
    }
  }
  if (tid == 0) {
    a.expert_offsets[n] = num_rows;
    *a.num_tiles = num_tiles;
  }
  __syncthreads();

  // Chunks of kPermuteThreads pairs in order: a pair's row is its expert's next free row plus the
  // pairs of the same expert before it in the chunk (earlier warps, then earlier lanes). Each
  // thread loads its pair of the next chunk before this chunk's barriers.
  int32_t e_next = tid < a.num_pairs ? a.experts[tid] : -1;
  for (int32_t base = 0; base < a.num_pairs; base += kPermuteThreads) {
    const int32_t i = base + tid;
    const bool valid = i < a.num_pairs;
    const int32_t e = e_next;
    e_next = i + kPermuteThreads < a.num_pairs ? a.experts[i + kPermuteThreads] : -1;
    const unsigned peers = __match_any_sync(kFull, e);
    const int32_t rank = __popc(peers & ((1u << lane) - 1u));
    if (valid && rank == 0) chunk_count[warp * n + e] = __popc(peers);
    __syncthreads();
    if (valid) {
      int32_t row = next[e] + rank;
      for (int w = 0; w < warp; ++w) row += chunk_count[w * n + e];
      a.row_of[i] = row;
      a.token_of[row] = i / a.top_k;
    }
    __syncthreads();
    if (valid && rank == 0) {
      // The last warp holding e advances next[e] by the chunk's pairs of e.
      bool last = true;
      for (int w = warp + 1; w < kPermuteWarps; ++w) last &= chunk_count[w * n + e] == 0;
      if (last) {
        int32_t add = 0;
        for (int w = 0; w <= warp; ++w) add += chunk_count[w * n + e];
        next[e] += add;
      }
    }
    __syncthreads();
    if (valid && rank == 0) chunk_count[warp * n + e] = 0;
    __syncthreads();
  }
}

__global__ void gather_kernel(const __grid_constant__ MoeGatherParams p) {
  detail::pdl_launch_dependents();
  detail::pdl_wait();
  const int32_t r = blockIdx.x;
  const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.x) +
                                                    p.token_of[r] * p.ldx);
  uint4* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.rows) +
                                        static_cast<int64_t>(r) * p.hidden);
  for (int32_t c = threadIdx.x; c < p.hidden / 8; c += blockDim.x) dst[c] = src[c];
}

template <typename Y, typename O>
__global__ void combine_kernel(const __grid_constant__ MoeCombineParams p) {
  detail::pdl_launch_dependents();
  detail::pdl_wait();
  const int32_t t = blockIdx.y;
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.hidden) return;
  float s = 0.0f;
  for (int32_t j = 0; j < p.top_k; ++j) {
    const int64_t row = p.row_of[t * p.top_k + j];
    const float w = p.weights[t * p.top_k + j];
    float y;
    if constexpr (sizeof(Y) == 2) {
      y = __bfloat162float(static_cast<const Y*>(p.y)[row * p.hidden + i]);
    } else {
      y = static_cast<const Y*>(p.y)[row * p.hidden + i];
    }
    // The CPU's order: dst = w0 y0, then dst += w_j y_j (each product rounded, no FMA).
    s = j == 0 ? __fmul_rn(w, y) : __fadd_rn(s, __fmul_rn(w, y));
  }
  O* out = static_cast<O*>(p.out) + t * p.ldo + i;
  if constexpr (sizeof(O) == 2) {
    *out = __float2bfloat16_rn(s);
  } else {
    *out = p.accumulate ? __fadd_rn(*out, s) : s;
  }
}

}  // namespace

Status moe_permute(const MoePermuteParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.top_k < 1 || p.top_k > kMoeMaxTopK || p.num_experts < 1 ||
      p.num_experts > kMoeMaxExperts || int64_t{p.num_tokens} * p.top_k > int64_t{1} << 30) {
    return Status::InvalidArgument("moe_permute: sizes out of range");
  }
  if (p.max_tiles < moe_max_tiles(p.num_tokens, p.top_k, p.num_experts, p.tile_config)) {
    return Status::InvalidArgument("moe_permute: max_tiles below moe_max_tiles()");
  }
  if (p.expert_offsets == nullptr || p.num_tiles == nullptr ||
      (p.num_tokens > 0 && (p.experts == nullptr || p.row_of == nullptr || p.token_of == nullptr ||
                            p.tile_expert == nullptr || p.tile_row == nullptr))) {
    return Status::InvalidArgument("moe_permute: a pointer is missing");
  }
  const PermuteArgs a{
      p.experts,   p.num_tokens * p.top_k, p.num_experts, moe_tile_rows(p.tile_config),
      p.max_tiles, p.expert_offsets,       p.row_of,      p.token_of,
      p.top_k,     p.tile_expert,          p.tile_row,    p.num_tiles};
  const size_t smem =
      sizeof(int32_t) * ((3 + kPermuteWarps) * size_t(p.num_experts) + kPermuteWarps);
  if (smem > 48 * 1024) {
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(
        permute_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  STRATA_CUDA_CHECK(
      detail::launch_pdl(permute_kernel, dim3(1), dim3(kPermuteThreads), smem, stream, a));
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

Status moe_gather(const MoeGatherParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.hidden <= 0 || p.hidden % 8 != 0 || p.ldx < p.hidden || p.ldx % 8 != 0) {
    return Status::InvalidArgument(
        "moe_gather: hidden must be a positive multiple of 8, ldx >= it");
  }
  if (p.num_rows == 0) return Status::Ok();
  if (p.x == nullptr || p.rows == nullptr || p.token_of == nullptr ||
      reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.rows) % 16 != 0) {
    return Status::InvalidArgument("moe_gather: null or misaligned pointers");
  }
  const int threads = std::min(256, std::max(32, p.hidden / 8));
  STRATA_CUDA_CHECK(detail::launch_pdl(gather_kernel, dim3(static_cast<unsigned>(p.num_rows)),
                                       dim3(threads), 0, stream, p));
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

Status moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.top_k < 1 || p.hidden <= 0 || p.ldo < p.hidden ||
      p.num_tokens > 65535) {
    return Status::InvalidArgument("moe_combine: sizes out of range (at most 65535 tokens)");
  }
  if (p.accumulate && p.out_dtype != DType::kF32) {
    return Status::InvalidArgument("moe_combine: accumulate needs an F32 out");
  }
  if (p.num_tokens == 0) return Status::Ok();
  if (p.y == nullptr || p.row_of == nullptr || p.weights == nullptr || p.out == nullptr) {
    return Status::InvalidArgument("moe_combine: a pointer is missing");
  }
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>((p.hidden + kThreads - 1) / kThreads),
                  static_cast<unsigned>(p.num_tokens));
  const bool y16 = p.y_dtype == DType::kBF16, o16 = p.out_dtype == DType::kBF16;
  if ((!y16 && p.y_dtype != DType::kF32) || (!o16 && p.out_dtype != DType::kF32)) {
    return Status::Unsupported("moe_combine: y and out must be F32 or BF16");
  }
  auto* kernel = y16 ? (o16 ? combine_kernel<__nv_bfloat16, __nv_bfloat16>
                            : combine_kernel<__nv_bfloat16, float>)
                     : (o16 ? combine_kernel<float, __nv_bfloat16> : combine_kernel<float, float>);
  STRATA_CUDA_CHECK(detail::launch_pdl(kernel, grid, dim3(kThreads), 0, stream, p));
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda

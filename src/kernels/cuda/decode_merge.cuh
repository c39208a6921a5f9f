#pragma once
// Split-KV merge of paged decode attention, done by the attention kernel itself: the last block of
// a (sequence, KV head, query-head tile) to finish combines every split's partial output and
// log-sum-exp (log2 units) into the final output, so a split launch needs no second kernel.
// Internal; included by the attention kernel.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

static_assert(kMaxDecodeSplits % 32 == 0, "whole warps of splits");

// Counts this block's split as done; true in the block that finished last (which resets the
// counter to 0 for the next launch). Every thread's partial writes are made visible first.
__device__ __forceinline__ bool last_split_done(int32_t* counter, int32_t num_splits) {
  __shared__ bool s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    s_last = atomicAdd(counter, 1) == num_splits - 1;
    if (s_last) *counter = 0;
  }
  __syncthreads();
  if (s_last) __threadfence();
  return s_last;
}

// out[seq, head] = sum_z w_z o_z / sum_z w_z, w_z = 2^(lse_z - max), and its log-sum-exp, for
// heads head0 .. head0 + count - 1: one warp per head, no block barrier (a batch-1 decode step
// waits on this tail). Lane l loads the log-sum-exps of splits l, l + 32, ...; the weights are
// reduced with shuffles and broadcast split by split while each lane sums its D/32 output
// elements. The partials are read through L2 (__ldcg): other blocks wrote them.
template <DType kQDType, int kHeadDim>
__device__ void merge_split_rows(const DecodeKernelArgs& a, int seq, int head0, int count) {
  using T = typename CudaType<kQDType>::type;
  constexpr int kPer = kHeadDim / 32;
  constexpr int kLaneSplits = kMaxDecodeSplits / 32;
  static_assert(kHeadDim % 32 == 0);
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(a.num_seqs) * a.num_qo_heads;
  for (int r = threadIdx.x / 32; r < count; r += kDecodeThreads / 32) {
    const int64_t idx0 = static_cast<int64_t>(seq) * a.num_qo_heads + head0 + r;
    float w[kLaneSplits];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kLaneSplits; ++i) {
      const int z = lane + 32 * i;
      w[i] = z < a.merge_splits ? __ldcg(a.partial_lse + z * stride + idx0) : -INFINITY;
      mx = fmaxf(mx, w[i]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneSplits; ++i) {
      w[i] = mx == -INFINITY || w[i] == -INFINITY ? 0.0f : fast_exp2(w[i] - mx);
      sum += w[i];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    float acc[kPer] = {};
    const float* po = a.partial_o + idx0 * kHeadDim + lane * kPer;
#pragma unroll
    for (int i = 0; i < kLaneSplits; ++i) {
      const int n = min(32, a.merge_splits - 32 * i);
#pragma unroll 4
      for (int zz = 0; zz < n; ++zz) {
        const float wz = __shfl_sync(0xffffffffu, w[i], zz);
        const float* src = po + (32 * i + zz) * stride * kHeadDim;
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[e] = fmaf(wz, __ldcg(src + e), acc[e]);
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* out = static_cast<T*>(a.o) + seq * a.o_seq_stride + (head0 + r) * kHeadDim + lane * kPer;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      if constexpr (kQDType == DType::kBF16) {
        out[e] = __float2bfloat16_rn(acc[e] * inv);
      } else {
        out[e] = __float2half_rn(acc[e] * inv);
      }
    }
    if (lane == 0) {
      const float lse2 = sum > 0.0f ? mx + log2f(sum) : -INFINITY;
      if (a.lse_ln != nullptr) a.lse_ln[idx0] = lse2 * 0.69314718055994531f;
      if (a.lse_log2 != nullptr) a.lse_log2[idx0] = lse2;
    }
  }
}

}  // namespace strata::cuda::detail

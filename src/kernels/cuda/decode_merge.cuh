#pragma once
// Split-KV merge of paged decode attention: combines the splits' partial outputs and
// log-sum-exps (log2 units) into the final output. Internal; included by the launcher.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

struct DecodeMergeArgs {
  const float* partial_o;    // [num_splits, num_seqs, num_qo_heads, head_dim]
  const float* partial_lse;  // [num_splits, num_seqs, num_qo_heads]
  void* o;
  int64_t o_seq_stride;
  float* lse_ln;    // optional
  float* lse_log2;  // optional
  int32_t num_seqs;
  int32_t num_qo_heads;
  int32_t head_dim;
  int32_t num_splits;
};

// One block per (sequence, query head): out = sum_z w_z o_z / sum_z w_z, w_z = 2^(lse_z - max).
// Thread z loads split z's log-sum-exp (splits <= kMaxDecodeSplits == kMergeThreads), the
// weights go through shared memory, and each thread then sums two output elements over the
// splits with several loads in flight: no serial chain of dependent loads.
inline constexpr int kMergeThreads = 128;
static_assert(kMaxDecodeSplits <= kMergeThreads, "one merge thread per split");

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
#pragma unroll
  for (int w = 1; w < kMergeThreads / 32; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
  __syncthreads();
  return v;
}

template <DType kDType>
__global__ void __launch_bounds__(kMergeThreads)
    decode_merge_kernel(const __grid_constant__ DecodeMergeArgs a) {
  using T = typename CudaType<kDType>::type;
  __shared__ float s_w[kMergeThreads];
  __shared__ float s_scratch[kMergeThreads / 32];
  const int seq = blockIdx.x;
  const int head = blockIdx.y;
  const int64_t stride = static_cast<int64_t>(a.num_seqs) * a.num_qo_heads;
  const int64_t idx0 = static_cast<int64_t>(seq) * a.num_qo_heads + head;
  const int z = threadIdx.x;
  const float lse = z < a.num_splits ? a.partial_lse[z * stride + idx0] : -INFINITY;
  const float lse_max = block_reduce(lse, true, s_scratch);
  const float w = lse_max == -INFINITY || lse == -INFINITY ? 0.0f : fast_exp2(lse - lse_max);
  s_w[z] = w;
  const float w_sum = block_reduce(w, false, s_scratch);  // its barriers also publish s_w
  const float inv = w_sum > 0.0f ? 1.0f / w_sum : 0.0f;
  T* out = static_cast<T*>(a.o) + seq * a.o_seq_stride + head * a.head_dim;
  const float* po = a.partial_o + idx0 * a.head_dim;
  for (int d = threadIdx.x * 2; d < a.head_dim; d += kMergeThreads * 2) {
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll 8
    for (int zz = 0; zz < a.num_splits; ++zz) {
      const float2 v = *reinterpret_cast<const float2*>(po + zz * stride * a.head_dim + d);
      sum.x = fmaf(s_w[zz], v.x, sum.x);
      sum.y = fmaf(s_w[zz], v.y, sum.y);
    }
    if constexpr (kDType == DType::kBF16) {
      *reinterpret_cast<__nv_bfloat162*>(out + d) = __floats2bfloat162_rn(sum.x * inv, sum.y * inv);
    } else {
      *reinterpret_cast<__half2*>(out + d) = __floats2half2_rn(sum.x * inv, sum.y * inv);
    }
  }
  if (threadIdx.x == 0) {
    const float lse2 = w_sum > 0.0f ? lse_max + log2f(w_sum) : -INFINITY;
    if (a.lse_ln != nullptr) a.lse_ln[idx0] = lse2 * 0.69314718055994531f;
    if (a.lse_log2 != nullptr) a.lse_log2[idx0] = lse2;
  }
}

}  // namespace strata::cuda::detail

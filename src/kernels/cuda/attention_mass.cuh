#pragma once
// The attention-mass pass of paged decode attention (DecodeAttentionParams::attn_mass): a second,
// K-only pass that turns each attended slot's scores into probabilities with the final
// log-sum-exp and adds them up per (slot, KV head). Internal; included by the launcher.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

// Tokens per thread block of the attention-mass pass.
inline constexpr int kMassChunkTokens = 512;

struct AttentionMassArgs {
  const void* q;
  int64_t q_seq_stride;
  const float* lse_log2;  // [num_seqs, num_qo_heads]
  float* mass;            // [num_pool_slots, num_kv_heads]
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  const int32_t* kv_last_page_len;
  const void* k_data;
  int64_t block_stride;
  int64_t head_stride;
  int64_t token_stride;
  int32_t num_kv_heads;
  int32_t num_qo_heads;
  int32_t group_size;
  int32_t block_size;
  int32_t log2_block_size;
  int32_t window_left;
  int32_t chunk_tokens;
  float scale_log2;
};

// Second pass for the attention mass: block (seq, kv_head, chunk) rescores its tokens against
// every query head of the group and adds sum_h 2^(s_h - lse_h) to each token's slot.
template <DType kDType, int kHeadDim>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_mass_kernel(const __grid_constant__ AttentionMassArgs a) {
  using T = typename CudaType<kDType>::type;
  // A token row is spread over kTpt lanes, kNv 16-byte vectors each; kGroups rows at a time.
  constexpr int kVecs = kHeadDim / 8;
  constexpr int kTpt = (kVecs % 16 == 0) ? 16 : (kVecs % 8 == 0) ? 8 : 4;
  constexpr int kNv = kVecs / kTpt;
  constexpr int kGroups = kDecodeThreads / kTpt;

  const int seq = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int grp = threadIdx.x / kTpt;
  const int lane = threadIdx.x % kTpt;
  const SeqExtent ext =
      seq_extent(a.kv_indptr, a.kv_last_page_len, a.block_size, a.window_left, seq);
  const int lo = ext.begin + blockIdx.z * a.chunk_tokens;
  const int hi = blockIdx.z == gridDim.z - 1 ? ext.kv_len : min(ext.kv_len, lo + a.chunk_tokens);
  const T* k_head = static_cast<const T*>(a.k_data) + kv_head * a.head_stride;
  const T* q_seq = static_cast<const T*>(a.q) + seq * a.q_seq_stride;
  const int32_t* pages = a.kv_indices + ext.page_begin;

  for (int base = lo; base < hi; base += kGroups) {
    const int t = base + grp < hi ? base + grp : lo;
    const int32_t page = pages[t >> a.log2_block_size];
    const int in_block = t & (a.block_size - 1);
    const T* k_row =
        k_head + static_cast<int64_t>(page) * a.block_stride + in_block * a.token_stride;
    float kf[kNv][8];
#pragma unroll
    for (int i = 0; i < kNv; ++i) {
      unpack8<kDType>(load_stream16(k_row + (lane + i * kTpt) * 8), kf[i]);
    }
    float mass = 0.0f;
    for (int g = 0; g < a.group_size; ++g) {
      const int head = kv_head * a.group_size + g;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kNv; ++i) {
        float qf[8];
        unpack8<kDType>(
            *reinterpret_cast<const uint4*>(q_seq + head * kHeadDim + (lane + i * kTpt) * 8), qf);
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(qf[e] * a.scale_log2, kf[i][e], dot);
      }
#pragma unroll
      for (int off = kTpt / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      mass += fast_exp2(dot - a.lse_log2[static_cast<int64_t>(seq) * a.num_qo_heads + head]);
    }
    if (base + grp < hi && lane == 0) {
      const int64_t slot = static_cast<int64_t>(page) * a.block_size + in_block;
      atomicAdd(a.mass + slot * a.num_kv_heads + kv_head, mass);
    }
  }
}

}  // namespace strata::cuda::detail

#pragma once
// Device code of paged prefill attention (docs/kernels.md). Included only by the instance files
// (instances/prefill_<dtype>_hd<dim>.cu).
//
// A thread block owns 64 query rows of one (sequence, query head); each of its 4 warps owns 16
// rows. K/V tiles of 64 tokens are copied from the paged pool into shared memory (cp.async, rows
// padded by 16 bytes so fragment loads hit 32 distinct banks); each warp computes S = Q K^T and
// O += P V with mma.sync m16n8k16 (16-bit inputs, fp32 accumulators) and keeps FlashAttention-2's
// online softmax in registers, in log2 units. Query row i of a sequence sits at position
// kv_len - q_len + i, so a chunk on top of a cached prefix and a decode token (q_len 1) are the
// same case. This first version reloads K/V for each query head of a group (from L2) and does not
// double-buffer the tiles.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/prefill_attention_impl.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

inline constexpr int kPrefillThreads = 128;
inline constexpr int kPrefillRows = 64;     // query rows per block (16 per warp)
inline constexpr int kPrefillKvTile = 64;   // tokens per K/V tile

struct PrefillKernelArgs {
  const void* q;
  int64_t q_token_stride;
  void* o;
  int64_t o_token_stride;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  const int32_t* kv_last_page_len;
  const void* k_data;
  const void* v_data;
  int64_t block_stride;
  int64_t head_stride;
  int64_t token_stride;
  int32_t num_qo_heads;
  int32_t group_size;
  int32_t block_size;
  int32_t log2_block_size;
  int32_t window_left;
  float scale_log2;
};

template <DType kDType>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (kDType == DType::kBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded into one 32-bit register of two 16-bit values (lo = first).
template <DType kDType>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (kDType == DType::kBF16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &h, sizeof(r));
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&r, &h, sizeof(r));
  }
  return r;
}

__device__ __forceinline__ uint32_t pack_u16(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

template <DType kDType, int kHeadDim>
__global__ void __launch_bounds__(kPrefillThreads)
    prefill_attention_kernel(const __grid_constant__ PrefillKernelArgs a) {
  using T = typename CudaType<kDType>::type;
  constexpr int kChunks = kHeadDim / 16;     // k-chunks of Q K^T
  constexpr int kDimTiles = kHeadDim / 8;    // n-tiles of O
  constexpr int kTokTiles = kPrefillKvTile / 8;
  constexpr int kRowElems = kHeadDim + 8;    // padded shared-memory row
  constexpr int kRowVecs = kHeadDim / 8;     // 16-byte vectors per row
  __shared__ __align__(16) uint16_t s_k[kPrefillKvTile * kRowElems];
  __shared__ __align__(16) uint16_t s_v[kPrefillKvTile * kRowElems];

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int kv_head = head / a.group_size;
  const int q_begin = a.qo_indptr[seq];
  const int q_len = a.qo_indptr[seq + 1] - q_begin;
  const int r0 = blockIdx.x * kPrefillRows;
  if (r0 >= q_len) return;
  const int page_begin = a.kv_indptr[seq];
  const int num_pages = a.kv_indptr[seq + 1] - page_begin;
  const int kv_len = num_pages == 0 ? 0 : (num_pages - 1) * a.block_size + a.kv_last_page_len[seq];
  const int offset = kv_len - q_len;  // position of query row 0
  const int r_end = min(q_len, r0 + kPrefillRows);
  const int kv_hi = offset + r_end;   // exclusive
  const int kv_lo = a.window_left >= 0 ? max(0, offset + r0 - a.window_left) : 0;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;  // fragment row (and column within an n-tile)
  const int t = lane & 3;
  const int row_a = r0 + warp * 16 + g;  // this thread's two query rows
  const int row_b = row_a + 8;

  // Q fragments for all k-chunks (zeros for rows past q_len).
  uint32_t qf[kChunks][4];
  const T* q_head = static_cast<const T*>(a.q) + head * kHeadDim;
  auto q_word = [&](int row, int col) -> uint32_t {
    if (row >= q_len) return 0u;
    return *reinterpret_cast<const uint32_t*>(q_head + (q_begin + row) * a.q_token_stride + col);
  };
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    qf[c][0] = q_word(row_a, 16 * c + 2 * t);
    qf[c][1] = q_word(row_b, 16 * c + 2 * t);
    qf[c][2] = q_word(row_a, 16 * c + 8 + 2 * t);
    qf[c][3] = q_word(row_b, 16 * c + 8 + 2 * t);
  }

  float o[kDimTiles][4];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  const int pos_a = offset + row_a;
  const int pos_b = offset + row_b;

  const T* k_head = static_cast<const T*>(a.k_data) + kv_head * a.head_stride;
  const T* v_head = static_cast<const T*>(a.v_data) + kv_head * a.head_stride;
  const int32_t* pages = a.kv_indices + page_begin;

  for (int tile = kv_lo; tile < kv_hi; tile += kPrefillKvTile) {
    // Copy the tile's K and V rows; tokens past kv_hi repeat token kv_lo and are masked.
    for (int idx = threadIdx.x; idx < kPrefillKvTile * kRowVecs; idx += kPrefillThreads) {
      const int r = idx / kRowVecs;
      const int v = idx % kRowVecs;
      const int tok = tile + r < kv_hi ? tile + r : kv_lo;
      const int64_t row = static_cast<int64_t>(pages[tok >> a.log2_block_size]) * a.block_stride +
                          (tok & (a.block_size - 1)) * a.token_stride;
      cp_async16(&s_k[r * kRowElems + v * 8], k_head + row + v * 8);
      cp_async16(&s_v[r * kRowElems + v * 8], v_head + row + v * 8);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    float s[kTokTiles][4];
#pragma unroll
    for (int j = 0; j < kTokTiles; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      const uint16_t* k_row = &s_k[(8 * j + g) * kRowElems];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(k_row + 16 * c + 2 * t);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(k_row + 16 * c + 8 + 2 * t);
        mma_16816<kDType>(s[j], qf[c], b0, b1);
      }
    }
    // Scale, mask (causal, window, tile end), and the new row maxima.
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTokTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = tile + 8 * j + 2 * t + (e & 1);
        const int pos = e < 2 ? pos_a : pos_b;
        const bool ok = tok < kv_hi && tok <= pos && (a.window_left < 0 || tok >= pos - a.window_left);
        s[j][e] = ok ? s[j][e] * a.scale_log2 : -INFINITY;
      }
      mx_a = fmaxf(mx_a, fmaxf(s[j][0], s[j][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    const float new_a = fmaxf(m_a, mx_a);
    const float new_b = fmaxf(m_b, mx_b);
    // A row with nothing attended yet keeps m = -inf: its p are 0 and its scale 1.
    const float alpha_a = new_a == -INFINITY ? 1.0f : fast_exp2(m_a - new_a);
    const float alpha_b = new_b == -INFINITY ? 1.0f : fast_exp2(m_b - new_b);
    m_a = new_a;
    m_b = new_b;
    l_a *= alpha_a;
    l_b *= alpha_b;
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) {
      o[j][0] *= alpha_a;
      o[j][1] *= alpha_a;
      o[j][2] *= alpha_b;
      o[j][3] *= alpha_b;
    }
#pragma unroll
    for (int j = 0; j < kTokTiles; ++j) {
      s[j][0] = new_a == -INFINITY ? 0.0f : fast_exp2(s[j][0] - new_a);
      s[j][1] = new_a == -INFINITY ? 0.0f : fast_exp2(s[j][1] - new_a);
      s[j][2] = new_b == -INFINITY ? 0.0f : fast_exp2(s[j][2] - new_b);
      s[j][3] = new_b == -INFINITY ? 0.0f : fast_exp2(s[j][3] - new_b);
      l_a += s[j][0] + s[j][1];
      l_b += s[j][2] + s[j][3];
    }
    // O += P V: P's accumulator layout is the A-fragment layout of the next product.
#pragma unroll
    for (int kc = 0; kc < kPrefillKvTile / 16; ++kc) {
      uint32_t pf[4];
      pf[0] = pack2<kDType>(s[2 * kc][0], s[2 * kc][1]);
      pf[1] = pack2<kDType>(s[2 * kc][2], s[2 * kc][3]);
      pf[2] = pack2<kDType>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      pf[3] = pack2<kDType>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
      const uint16_t* v0 = &s_v[(16 * kc + 2 * t) * kRowElems];
#pragma unroll
      for (int j = 0; j < kDimTiles; ++j) {
        const int col = 8 * j + g;
        const uint32_t b0 = pack_u16(v0[col], v0[kRowElems + col]);
        const uint32_t b1 = pack_u16(v0[8 * kRowElems + col], v0[9 * kRowElems + col]);
        mma_16816<kDType>(o[j], pf, b0, b1);
      }
    }
    __syncthreads();  // the next tile overwrites s_k and s_v
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f;
  const float inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  T* o_head = static_cast<T*>(a.o) + head * kHeadDim;
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) {
    const int col = 8 * j + 2 * t;
    if (row_a < q_len) {
      *reinterpret_cast<uint32_t*>(o_head + (q_begin + row_a) * a.o_token_stride + col) =
          pack2<kDType>(o[j][0] * inv_a, o[j][1] * inv_a);
    }
    if (row_b < q_len) {
      *reinterpret_cast<uint32_t*>(o_head + (q_begin + row_b) * a.o_token_stride + col) =
          pack2<kDType>(o[j][2] * inv_b, o[j][3] * inv_b);
    }
  }
}

template <DType kDType, int32_t kHeadDim>
Status run_prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream) {
  const PagedKvCacheView& c = p.cache;
  PrefillKernelArgs a{};
  a.q = p.q;
  a.q_token_stride = p.q_token_stride;
  a.o = p.o;
  a.o_token_stride = p.o_token_stride;
  a.qo_indptr = p.qo_indptr;
  a.kv_indptr = p.layout.kv_indptr;
  a.kv_indices = p.layout.kv_indices;
  a.kv_last_page_len = p.layout.kv_last_page_len;
  a.k_data = c.k_data;
  a.v_data = c.v_data;
  a.block_stride = c.block_stride;
  a.head_stride = c.head_stride;
  a.token_stride = c.token_stride;
  a.num_qo_heads = p.num_qo_heads;
  a.group_size = p.num_qo_heads / c.num_kv_heads;
  a.block_size = c.block_size;
  int log2_bs = 0;
  while ((1 << (log2_bs + 1)) <= c.block_size) ++log2_bs;
  a.log2_block_size = log2_bs;
  a.window_left = p.window_left;
  a.scale_log2 = p.sm_scale * 1.4426950408889634f;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.max_q_len, kPrefillRows)),
                  static_cast<unsigned>(p.num_qo_heads), static_cast<unsigned>(p.layout.num_seqs));
  prefill_attention_kernel<kDType, kHeadDim><<<grid, kPrefillThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda::detail

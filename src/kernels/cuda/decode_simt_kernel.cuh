#pragma once
// Device code of paged decode attention (docs/kernels.md has the design and the numbers). Included
// only by the instance files (instances/decode_<dtype>_hd<dim>.cu), one (dtype x head dim) each.
//
// Work decomposition. A thread block of kDecodeThreads threads owns one (sequence, KV head,
// query-head tile, split). Its threads form token groups of kTpt lanes; a group reads one token's
// K and V rows (head_dim elements, 16 bytes per lane per vector) and scores it against every query
// head of the tile, so a KV byte is loaded once for all kGroupTile query heads. Each group keeps
// its own online-softmax state (running max m, sum l, accumulator acc) over the tokens it visits;
// groups are merged at the end, first inside each warp with shuffles, then across warps through
// shared memory. Scores are kept in log2 units (q is pre-scaled by sm_scale * log2(e)) so that
// every exponential is one ex2.approx.
//
// Loads. Each thread copies its own 16-byte vectors of K and V with cp.async into a private slice
// of shared memory, kStages tiles deep, and reads back only what it copied, so the pipeline needs
// no barrier; block ids for the next tile are loaded one iteration ahead. Two tiles stay in flight
// while one is computed, which doubled the bytes in flight of plain register loads (+12% on
// 16 x 32768 on an H200 GPU).
//
// Split-KV: with num_splits > 1, block z covers tokens [lo + z * chunk, lo + (z + 1) * chunk) of
// the attended range (the last split runs to the end, so a kv_len above the planner's bound is
// still correct) and writes a float partial output and its log-sum-exp to the workspace;
// decode_merge_kernel combines the splits.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/decode_attention_impl.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

inline constexpr int kDecodeThreads = 128;
// Fewest tokens per split: below this the merge and launch overheads outweigh the parallelism.
inline constexpr int kMinSplitTokens = 256;

struct DecodeKernelArgs {
  const void* q;           // [num_seqs, num_qo_heads, head_dim]
  int64_t q_seq_stride;
  void* o;                 // [num_seqs, num_qo_heads, head_dim]
  int64_t o_seq_stride;
  float* partial_o;        // [num_splits, num_seqs, num_qo_heads, head_dim]; null when unsplit
  float* partial_lse;      // [num_splits, num_seqs, num_qo_heads], log2 units
  float* lse_ln;           // [num_seqs, num_qo_heads] natural log, optional (unsplit only)
  float* lse_log2;         // [num_seqs, num_qo_heads] log2 units, optional (unsplit only)
  const int32_t* kv_indptr;         // [num_seqs + 1]
  const int32_t* kv_indices;        // [nnz]
  const int32_t* kv_last_page_len;  // [num_seqs]
  const void* k_data;      // layer's K of block 0
  const void* v_data;      // layer's V of block 0
  int64_t block_stride;    // elements
  int64_t head_stride;
  int64_t token_stride;
  int32_t num_seqs;
  int32_t num_qo_heads;
  int32_t group_size;      // query heads per KV head
  int32_t q_tiles;         // ceil(group_size / kGroupTile)
  int32_t block_size;
  int32_t log2_block_size;
  int32_t window_left;     // -1 = none
  int32_t num_splits;
  int32_t chunk_tokens;    // tokens per split (unused when num_splits == 1)
  float scale_log2;        // sm_scale * log2(e)
};

// How a head_dim is spread over a token group: kTpt lanes, kNv 16-byte vectors each (one vector
// per lane for head dims 64 and 128: the fewest registers for q and the accumulators; spreading a
// row over fewer lanes was tried and was no faster, docs/kernels.md).
template <int kHeadDim>
struct DecodeShape {
  static constexpr int kVecs = kHeadDim / 8;
  static constexpr int kTpt = (kVecs % 16 == 0) ? 16 : (kVecs % 8 == 0) ? 8 : 4;
  static constexpr int kNv = kVecs / kTpt;
  static constexpr int kElems = kNv * 8;  // elements of a row per lane
  static constexpr int kGroups = kDecodeThreads / kTpt;
  // Tokens a group copies per stage: 4 vectors of K and 4 of V per lane.
  static constexpr int kTile = kNv >= 4 ? 1 : 4 / kNv;
  // Three stages: two tiles in flight while one is computed. Four or six (fewer resident blocks
  // per SM) measured slower on an H200 GPU (docs/kernels.md).
  static constexpr int kStages = 3;
  static constexpr size_t kPipelineBytes =
      static_cast<size_t>(kStages) * kTile * 2 * kNv * 16 * kDecodeThreads;
  static_assert(kVecs % kTpt == 0 && 32 % kTpt == 0, "head_dim must be a multiple of 32");
};

// Extent of one sequence in the paged layout, and the attended range [begin, kv_len).
struct SeqExtent {
  int32_t page_begin;
  int32_t kv_len;
  int32_t begin;
};

__device__ __forceinline__ SeqExtent seq_extent(const int32_t* indptr, const int32_t* last_len,
                                                int32_t block_size, int32_t window_left,
                                                int32_t seq) {
  SeqExtent e;
  e.page_begin = indptr[seq];
  const int32_t num_pages = indptr[seq + 1] - e.page_begin;
  e.kv_len = num_pages == 0 ? 0 : (num_pages - 1) * block_size + last_len[seq];
  e.begin = window_left >= 0 ? max(0, e.kv_len - 1 - window_left) : 0;
  return e;
}

// Merges online-softmax state (m2, l2, acc2) into (m, l, acc).
template <int kN>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&acc)[kN], float m2,
                                            float l2, const float (&acc2)[kN]) {
  const float m_new = fmaxf(m, m2);
  const float a1 = m_new == -INFINITY ? 0.0f : fast_exp2(m - m_new);
  const float a2 = m_new == -INFINITY ? 0.0f : fast_exp2(m2 - m_new);
  l = l * a1 + l2 * a2;
#pragma unroll
  for (int e = 0; e < kN; ++e) acc[e] = acc[e] * a1 + acc2[e] * a2;
  m = m_new;
}

template <DType kDType, int kHeadDim, int kGroupTile>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_attention_kernel(const __grid_constant__ DecodeKernelArgs a) {
  using Shape = DecodeShape<kHeadDim>;
  using T = typename CudaType<kDType>::type;
  constexpr int kTpt = Shape::kTpt;
  constexpr int kNv = Shape::kNv;
  constexpr int kElems = Shape::kElems;
  constexpr int kGroups = Shape::kGroups;
  constexpr int kTile = Shape::kTile;
  constexpr int kStages = Shape::kStages;
  constexpr int kWarps = kDecodeThreads / 32;

  const int seq = blockIdx.x;
  const int kv_head = blockIdx.y / a.q_tiles;
  const int g_begin = (blockIdx.y % a.q_tiles) * kGroupTile;
  const int g_count = min(kGroupTile, a.group_size - g_begin);
  const int qo_head0 = kv_head * a.group_size + g_begin;
  const int split = blockIdx.z;
  const int grp = threadIdx.x / kTpt;
  const int lane = threadIdx.x % kTpt;

  const SeqExtent ext =
      seq_extent(a.kv_indptr, a.kv_last_page_len, a.block_size, a.window_left, seq);
  const int lo = ext.begin + split * a.chunk_tokens;
  const int hi = split == a.num_splits - 1 ? ext.kv_len : min(ext.kv_len, lo + a.chunk_tokens);

  // This lane's slice of each query head, pre-scaled into log2 units.
  float q[kGroupTile][kElems];
  const T* q_seq = static_cast<const T*>(a.q) + seq * a.q_seq_stride;
#pragma unroll
  for (int g = 0; g < kGroupTile; ++g) {
#pragma unroll
    for (int i = 0; i < kNv; ++i) {
      float f[8] = {};
      if (g < g_count) {
        const uint4 raw = *reinterpret_cast<const uint4*>(q_seq + (qo_head0 + g) * kHeadDim +
                                                           (lane + i * kTpt) * 8);
        unpack8<kDType>(raw, f);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][i * 8 + e] = f[e] * a.scale_log2;
    }
  }

  float m[kGroupTile];
  float l[kGroupTile];
  float acc[kGroupTile][kElems];
#pragma unroll
  for (int g = 0; g < kGroupTile; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[g][e] = 0.0f;
  }

  const T* k_head = static_cast<const T*>(a.k_data) + kv_head * a.head_stride;
  const T* v_head = static_cast<const T*>(a.v_data) + kv_head * a.head_stride;
  const int32_t* pages = a.kv_indices + ext.page_begin;
  const int in_block_mask = a.block_size - 1;

  // Per-thread cp.async pipeline: stage st, token u, K (0) or V (1), vector i of this thread lives
  // at smem[((st * kTile + u) * 2 + kv) * kNv + i][threadIdx.x], so a warp's copies and reads
  // touch consecutive 16-byte words (no bank conflicts) and each thread reads back only what it
  // copied itself. kStages - 1 tiles are in flight while one is computed.
  extern __shared__ uint4 smem[];
  auto slot = [&](int st, int u, int kv, int i) -> uint4* {
    return &smem[(((st * kTile + u) * 2 + kv) * kNv + i) * kDecodeThreads + threadIdx.x];
  };
  // Tile j of this group covers tokens [lo + (j * kGroups + grp) * kTile, + kTile); the
  // iteration count is uniform over the block so that every lane reaches every shuffle. Tokens
  // past hi are replaced by token lo (always valid) and discarded.
  const int iters = hi > lo ? static_cast<int>(ceil_div(hi - lo, kGroups * kTile)) : 0;
  auto token = [&](int j, int u) {
    const int t = lo + (j * kGroups + grp) * kTile + u;
    return t < hi ? t : lo;
  };
  int next_page[kTile];  // block ids of the next tile to issue, loaded one iteration early
  auto load_pages = [&](int j) {
#pragma unroll
    for (int u = 0; u < kTile; ++u) next_page[u] = pages[token(j, u) >> a.log2_block_size];
  };
  auto issue = [&](int j) {
    const int st = j % kStages;
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      const int64_t row = static_cast<int64_t>(next_page[u]) * a.block_stride +
                          (token(j, u) & in_block_mask) * a.token_stride;
#pragma unroll
      for (int i = 0; i < kNv; ++i) {
        cp_async16(slot(st, u, 0, i), k_head + row + (lane + i * kTpt) * 8);
        cp_async16(slot(st, u, 1, i), v_head + row + (lane + i * kTpt) * 8);
      }
    }
  };
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < iters) {
      load_pages(j);
      issue(j);
    }
    cp_async_commit();
  }
  if (kStages - 1 < iters) load_pages(kStages - 1);

  for (int it = 0; it < iters; ++it) {
    const int ahead = it + kStages - 1;
    if (ahead < iters) issue(ahead);
    cp_async_commit();
    if (ahead + 1 < iters) load_pages(ahead + 1);
    cp_async_wait<kStages - 1>();

    const int st = it % kStages;
    const int t0 = lo + (it * kGroups + grp) * kTile;
    float s[kTile][kGroupTile];
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      float kf[kElems];
#pragma unroll
      for (int i = 0; i < kNv; ++i) {
        float f[8];
        unpack8<kDType>(*slot(st, u, 0, i), f);
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[i * 8 + e] = f[e];
      }
#pragma unroll
      for (int g = 0; g < kGroupTile; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kElems; ++e) dot = fmaf(q[g][e], kf[e], dot);
        s[u][g] = dot;
      }
    }
#pragma unroll
    for (int off = kTpt / 2; off > 0; off >>= 1) {
#pragma unroll
      for (int u = 0; u < kTile; ++u) {
#pragma unroll
        for (int g = 0; g < kGroupTile; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
      }
    }
    if (t0 < hi) {
      float p[kTile][kGroupTile];
#pragma unroll
      for (int g = 0; g < kGroupTile; ++g) {
        float m_new = m[g];
#pragma unroll
        for (int u = 0; u < kTile; ++u) {
          if (t0 + u < hi) m_new = fmaxf(m_new, s[u][g]);
        }
        // m_new is finite: token t0 is valid. Rescale only when the running max moved.
        if (m_new > m[g]) {
          const float alpha = fast_exp2(m[g] - m_new);
          l[g] *= alpha;
#pragma unroll
          for (int e = 0; e < kElems; ++e) acc[g][e] *= alpha;
          m[g] = m_new;
        }
#pragma unroll
        for (int u = 0; u < kTile; ++u) {
          p[u][g] = t0 + u < hi ? fast_exp2(s[u][g] - m_new) : 0.0f;
          l[g] += p[u][g];
        }
      }
#pragma unroll
      for (int u = 0; u < kTile; ++u) {
#pragma unroll
        for (int i = 0; i < kNv; ++i) {
          float vf[8];
          unpack8<kDType>(*slot(st, u, 1, i), vf);
#pragma unroll
          for (int g = 0; g < kGroupTile; ++g) {
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[g][i * 8 + e] = fmaf(p[u][g], vf[e], acc[g][i * 8 + e]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // Merge the token groups of each warp: lanes kTpt apart hold the same elements.
#pragma unroll
  for (int off = kTpt; off < 32; off <<= 1) {
#pragma unroll
    for (int g = 0; g < kGroupTile; ++g) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float l2 = __shfl_xor_sync(0xffffffffu, l[g], off);
      float acc2[kElems];
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc2[e] = __shfl_xor_sync(0xffffffffu, acc[g][e], off);
      merge_state(m[g], l[g], acc[g], m2, l2, acc2);
    }
  }

  // Then the warps, through shared memory: warps 1.. publish, warp 0's first group merges.
  // The pipeline buffer is free once every thread is past the loop.
  __syncthreads();
  auto& s_acc = *reinterpret_cast<float(*)[kWarps - 1][kGroupTile][kHeadDim]>(smem);
  __shared__ float s_ml[kWarps - 1][kGroupTile][2];
  const int warp = threadIdx.x / 32;
  const int warp_lane = threadIdx.x % 32;
  if (warp > 0 && warp_lane < kTpt) {
#pragma unroll
    for (int g = 0; g < kGroupTile; ++g) {
#pragma unroll
      for (int i = 0; i < kNv; ++i) {
#pragma unroll
        for (int e = 0; e < 8; ++e) s_acc[warp - 1][g][(lane + i * kTpt) * 8 + e] = acc[g][i * 8 + e];
      }
      if (warp_lane == 0) {
        s_ml[warp - 1][g][0] = m[g];
        s_ml[warp - 1][g][1] = l[g];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x >= kTpt) return;

#pragma unroll
  for (int w = 0; w < kWarps - 1; ++w) {
#pragma unroll
    for (int g = 0; g < kGroupTile; ++g) {
      float acc2[kElems];
#pragma unroll
      for (int i = 0; i < kNv; ++i) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc2[i * 8 + e] = s_acc[w][g][(lane + i * kTpt) * 8 + e];
      }
      merge_state(m[g], l[g], acc[g], s_ml[w][g][0], s_ml[w][g][1], acc2);
    }
  }

#pragma unroll
  for (int g = 0; g < kGroupTile; ++g) {
    if (g >= g_count) break;
    const int head = qo_head0 + g;
    const float inv_l = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
    const float lse2 = l[g] > 0.0f ? m[g] + log2f(l[g]) : -INFINITY;
    if (a.partial_o == nullptr) {
      T* out = static_cast<T*>(a.o) + seq * a.o_seq_stride + head * kHeadDim;
#pragma unroll
      for (int i = 0; i < kNv; ++i) {
        float f[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = acc[g][i * 8 + e] * inv_l;
        *reinterpret_cast<uint4*>(out + (lane + i * kTpt) * 8) = pack8<kDType>(f);
      }
      if (lane == 0) {
        const int64_t idx = static_cast<int64_t>(seq) * a.num_qo_heads + head;
        if (a.lse_ln != nullptr) a.lse_ln[idx] = lse2 * 0.69314718055994531f;
        if (a.lse_log2 != nullptr) a.lse_log2[idx] = lse2;
      }
    } else {
      const int64_t idx =
          (static_cast<int64_t>(split) * a.num_seqs + seq) * a.num_qo_heads + head;
      float* out = a.partial_o + idx * kHeadDim;
#pragma unroll
      for (int i = 0; i < kNv; ++i) {
        float4* dst = reinterpret_cast<float4*>(out + (lane + i * kTpt) * 8);
        dst[0] = make_float4(acc[g][i * 8 + 0] * inv_l, acc[g][i * 8 + 1] * inv_l,
                             acc[g][i * 8 + 2] * inv_l, acc[g][i * 8 + 3] * inv_l);
        dst[1] = make_float4(acc[g][i * 8 + 4] * inv_l, acc[g][i * 8 + 5] * inv_l,
                             acc[g][i * 8 + 6] * inv_l, acc[g][i * 8 + 7] * inv_l);
      }
      if (lane == 0) a.partial_lse[idx] = lse2;
    }
  }
}

}  // namespace strata::cuda::detail

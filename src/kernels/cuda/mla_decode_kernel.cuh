#pragma once
// Device code of paged MLA decode attention (mla_decode.h; docs/kernels.md, "MLA decode
// attention"). Included only by the launcher (mla_decode.cu).
//
// Work decomposition. A block of 8 warps owns one (sequence, head tile, split). The head tile's
// query heads are kRowGroups groups of 16 rows (the M dimension of mma.sync m16n8k16); the
// warps form kRowGroups x kCols, warp (r, c) = row group r, column part c:
//   - S = Q K^T: warp (r, c) computes rows 16r.. of S for its kWarpTokens tokens of the tile
//     (tokens c * kWarpTokens ..), all 576 channels; Q is read from shared memory (72 KiB for
//     64 heads: too large for registers);
//   - the softmax: the row maxima of the tile's column parts meet in shared memory (a named
//     barrier per row group), so the kCols warps of a row group keep the same running maximum;
//     each writes its probabilities as bf16 into the row group's P tile;
//   - O += P V: warp (r, c) multiplies the row group's whole P (all tile tokens) by the
//     channels c * kWarpChannels .. of V (V = the first 512 channels of the same rows), and owns
//     those accumulators for the whole split.
//   64-head tiles: 4 x 2 warps, 32-token tiles (16 tokens of S and 256 output channels, 128
//   fp32 accumulators, per warp). 16-head tiles (head counts that 64 does not divide): 1 x 8
//   warps, 64-token tiles (8 tokens of S and 64 channels per warp).
// Each warp's row sums cover its own tokens; since the row group shares its maxima, the final
// sum is the column parts' sum (shared memory again at the end).
//
// Loads. The block copies each tile's latent rows with cp.async into a ring of kStages buffers
// (rows padded to 584 elements: 1168 bytes, 16 mod 128, so the 8 row addresses of an ldmatrix
// fall on 8 distinct 16-byte bank groups), and Q once beside them. Tokens past the end are
// zero-filled and masked. One block barrier per tile hands the ring around; two named barriers
// per row group order the softmax exchange.
//
// Split-KV: split z covers [z * chunk, (z + 1) * chunk) (chunk a multiple of the tile, the last
// split to the end), writes a float partial output and its log-sum-exp (log2 units) to the
// workspace, and the last split to finish merges them (decode_merge.cuh, the GQA decode
// kernel's merge at head dim 512).

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/decode_merge.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

inline constexpr int kMlaThreads = 256;
// Tokens of a split whose latent rows are asked into L2 before pdl_wait.
inline constexpr int kMlaPrefetchTokens = 256;

template <int kRowGroups>
struct MlaShape {
  static_assert(kRowGroups == 1 || kRowGroups == 4);
  static constexpr int kWarps = kMlaThreads / 32;
  static constexpr int kCols = kWarps / kRowGroups;  // warps per row group
  static constexpr int kHeads = 16 * kRowGroups;
  static constexpr int kWarpTokens = kRowGroups == 4 ? 16 : 8;  // S columns per warp
  static constexpr int kTileTokens = kCols * kWarpTokens;       // 32 or 64
  static constexpr int kWarpChannels = kMlaValueDim / kCols;    // O columns per warp
  static constexpr int kStages = kRowGroups == 4 ? 3 : 2;
  static constexpr int kPitch = kMlaLatentDim + 8;    // elements per shared row (Q and latent)
  static constexpr int kPPitch = kTileTokens + 8;     // elements per P row
  static constexpr int kRowVecs = kMlaLatentDim / 8;  // 16-byte vectors per row
  static constexpr size_t kQBytes = static_cast<size_t>(kHeads) * kPitch * 2;
  static constexpr size_t kStageBytes = static_cast<size_t>(kTileTokens) * kPitch * 2;
  static constexpr size_t kPBytes = static_cast<size_t>(kHeads) * kPPitch * 2;
  static constexpr size_t kSmemBytes = kQBytes + kStages * kStageBytes + kPBytes;
  static_assert(kSmemBytes <= 227 * 1024, "one block per SM must fit");
  static_assert((kPitch * 2) % 128 == 16, "ldmatrix rows on distinct bank groups");
  static_assert(kQBytes % 16 == 0 && kStageBytes % 16 == 0);
  static_assert(kWarpTokens % 8 == 0 && kTileTokens % 16 == 0 && kWarpChannels % 16 == 0);
};

struct MlaKernelArgs {
  const void* q;  // [num_seqs, num_heads, 576] bf16
  int64_t q_seq_stride;
  const int32_t* kv_indptr;         // [num_seqs + 1]
  const int32_t* kv_indices;        // [nnz]
  const int32_t* kv_last_page_len;  // [num_seqs]
  const void* latent;               // the layer's latent in block 0 (bf16)
  int64_t block_stride;             // elements
  int64_t token_stride;             // elements
  int32_t block_size;
  int32_t log2_block_size;
  int32_t num_splits;
  int32_t chunk_tokens;  // tokens per split (a multiple of the tile; unused unsplit)
  float scale_log2;      // sm_scale * log2(e)
  // Split launches: 1 = the last split of a head tile merges (decode_merge.cuh; few partial
  // bytes per tile), 0 = mla_merge_kernel runs after this kernel.
  int32_t merge_in_kernel;
  // The outputs as the split merge reads them: o, o_seq_stride, num_seqs, num_qo_heads, lse_ln,
  // partial_o / partial_lse / split_counters / merge_splits (split launches; partial_o null
  // unsplit). head_dim there is 512.
  DecodeKernelArgs out;
};

// Before pdl_wait: asks L2 for the latent rows of the first kMlaPrefetchTokens tokens of this
// block's split (one bulk prefetch per block of the block table). Only head tile 0 asks; the
// other tiles of the sequence read the same rows. Block tables and lengths are step inputs no
// kernel of the step writes (pdl.cuh).
__device__ __forceinline__ void mla_prefetch_l2(const MlaKernelArgs& a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blockIdx.y != 0) return;
  const SeqExtent ext =
      seq_extent(a.kv_indptr, a.kv_last_page_len, a.block_size, -1, static_cast<int>(blockIdx.x));
  const int split = blockIdx.z;
  const int lo = split * a.chunk_tokens;
  const int split_hi =
      split == a.num_splits - 1 ? ext.kv_len : min(ext.kv_len, lo + a.chunk_tokens);
  const int hi = min(split_hi, lo + kMlaPrefetchTokens);
  if (hi <= lo) return;
  const int first = lo >> a.log2_block_size;
  const int num = ((hi - 1) >> a.log2_block_size) - first + 1;
  const int item = static_cast<int>(threadIdx.x);
  if (item >= num) return;
  const int logical = first + item;
  const int tok_begin = max(lo, logical << a.log2_block_size);
  const int tok_end = min(hi, (logical + 1) << a.log2_block_size);
  const int64_t page = a.kv_indices[ext.page_begin + logical];
  const uint16_t* p = static_cast<const uint16_t*>(a.latent) + page * a.block_stride +
                      (tok_begin & (a.block_size - 1)) * a.token_stride;
  const uint32_t bytes = static_cast<uint32_t>((tok_end - tok_begin) * a.token_stride * 2);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// grid (num_seqs, num_heads / kHeads, num_splits), kMlaThreads threads, MlaShape::kSmemBytes of
// dynamic shared memory.
template <int kRowGroups>
__global__ void __launch_bounds__(kMlaThreads, 1)
    mla_decode_kernel(const __grid_constant__ MlaKernelArgs a) {
  using Shape = MlaShape<kRowGroups>;
  using T = __nv_bfloat16;
  constexpr int kCols = Shape::kCols;
  constexpr int kT = Shape::kTileTokens;
  constexpr int kWT = Shape::kWarpTokens;
  constexpr int kWC = Shape::kWarpChannels;
  constexpr int kStages = Shape::kStages;
  constexpr int kPitch = Shape::kPitch;
  constexpr int kPPitch = Shape::kPPitch;
  constexpr int kSN = kWT / 8;                  // n-tiles of S per warp
  constexpr int kON = kWC / 8;                  // n-tiles of O per warp
  constexpr int kQChunks = kMlaLatentDim / 16;  // k-chunks of Q K^T (36)
  constexpr int kRowThreads = kCols * 32;
  static_assert(kQChunks % 2 == 0);

  pdl_launch_dependents();
  mla_prefetch_l2(a);
  pdl_wait();

  const int seq = blockIdx.x;
  const int head0 = blockIdx.y * Shape::kHeads;
  const int split = blockIdx.z;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int row_group = warp / kCols;
  const int col = warp % kCols;
  const int mi = lane >> 3;  // ldmatrix: lane l gives row (l & 7) of matrix (l >> 3)
  const int mr = lane & 7;

  const SeqExtent ext = seq_extent(a.kv_indptr, a.kv_last_page_len, a.block_size, -1, seq);
  const int32_t* pages = a.kv_indices + ext.page_begin;
  const int lo = split * a.chunk_tokens;
  const int hi = split == a.num_splits - 1 ? ext.kv_len : min(ext.kv_len, lo + a.chunk_tokens);
  const int num_tiles = hi > lo ? (hi - lo + kT - 1) / kT : 0;

  extern __shared__ uint4 smem[];
  T* q_s = reinterpret_cast<T*>(smem);  // [kHeads][kPitch]
  char* ring = reinterpret_cast<char*>(smem) + Shape::kQBytes;
  T* p_s = reinterpret_cast<T*>(ring + kStages * Shape::kStageBytes);  // [kHeads][kPPitch]
  auto stage = [&](int st) { return reinterpret_cast<T*>(ring + st * Shape::kStageBytes); };
  __shared__ float s_red[kRowGroups][kCols][16];  // per tile: the column parts' row maxima
  __shared__ float s_sum[kRowGroups][kCols][16];  // at the end: their row sums

  // Q of the tile's heads, in the first cp.async group with tile 0.
  {
    const T* q_seq = static_cast<const T*>(a.q) + seq * a.q_seq_stride +
                     static_cast<int64_t>(head0) * kMlaLatentDim;
    for (int idx = tid; idx < Shape::kHeads * Shape::kRowVecs; idx += kMlaThreads) {
      const int r = idx / Shape::kRowVecs;
      const int c = idx % Shape::kRowVecs;
      cp_async16(q_s + r * kPitch + c * 8, q_seq + r * kMlaLatentDim + c * 8);
    }
  }
  const T* latent = static_cast<const T*>(a.latent);
  const int in_block_mask = a.block_size - 1;
  // Tile i's kT rows into stage i % kStages; rows past hi are zero-filled (and masked later).
  auto issue = [&](int i) {
    T* dst = stage(i % kStages);
    const int t0 = lo + i * kT;
    for (int idx = tid; idx < kT * Shape::kRowVecs; idx += kMlaThreads) {
      const int r = idx / Shape::kRowVecs;
      const int c = idx % Shape::kRowVecs;
      const int tok = t0 + r;
      const bool ok = tok < hi;
      const T* src = latent;
      if (ok) {
        src = latent + static_cast<int64_t>(pages[tok >> a.log2_block_size]) * a.block_stride +
              (tok & in_block_mask) * a.token_stride + c * 8;
      }
      cp_async16_zfill(dst + r * kPitch + c * 8, src, ok);
    }
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < num_tiles) issue(i);
    cp_async_commit();
  }

  float o[kON][4];
#pragma unroll
  for (int j = 0; j < kON; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  // Rows g (a) and g + 8 (b) of the row group: running maximum (log2 units, shared by the row
  // group's warps) and this warp's running sum over its own tokens.
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  const T* q_rows = q_s + (16 * row_group) * kPitch;
  T* p_rows = p_s + (16 * row_group) * kPPitch;
  const uint32_t bar_id = 1 + row_group;

  for (int i = 0; i < num_tiles; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile i visible to all; every warp is done with tile i - 1's stage
    if (i + kStages - 1 < num_tiles) issue(i + kStages - 1);
    cp_async_commit();

    const T* ks = stage(i % kStages);
    const int t0 = lo + i * kT;
    const T* k_rows = ks + (col * kWT) * kPitch;

    // S = Q K^T over 36 k-chunks, taken in pairs; two accumulator chains (even, odd chunk).
    float s2[2][kSN][4] = {};
#pragma unroll 3
    for (int kc = 0; kc < kQChunks; kc += 2) {
      uint32_t qa0[4], qa1[4];
      ldmatrix_x4(qa0, q_rows + (mr + (mi & 1) * 8) * kPitch + 16 * kc + (mi >> 1) * 8);
      ldmatrix_x4(qa1, q_rows + (mr + (mi & 1) * 8) * kPitch + 16 * (kc + 1) + (mi >> 1) * 8);
#pragma unroll
      for (int j = 0; j < kSN; ++j) {
        // Matrices: (tokens 8j.., channels 16kc..+7), (.., 16kc+8..), (.., 16(kc+1)..),
        // (.., 16(kc+1)+8..) -> b0, b1 of chunk kc, then of kc + 1.
        uint32_t b[4];
        ldmatrix_x4(b, k_rows + (8 * j + mr) * kPitch + 16 * kc + mi * 8);
        mma_16816<DType::kBF16>(s2[0][j], qa0, b[0], b[1]);
        mma_16816<DType::kBF16>(s2[1][j], qa1, b[2], b[3]);
      }
    }
    float s[kSN][4];
    const bool full = t0 + kT <= hi;
#pragma unroll
    for (int j = 0; j < kSN; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = t0 + col * kWT + 8 * j + 2 * t + (e & 1);
        s[j][e] = full || tok < hi ? (s2[0][j][e] + s2[1][j][e]) * a.scale_log2 : -INFINITY;
      }
    }

    // The tile's row maxima: this warp's tokens, the 4 lanes of a row, then the column parts.
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < kSN; ++j) {
      mx_a = fmaxf(mx_a, fmaxf(s[j][0], s[j][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    if (t == 0) {
      s_red[row_group][col][g] = mx_a;
      s_red[row_group][col][g + 8] = mx_b;
    }
    named_barrier_sync(bar_id, kRowThreads);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      mx_a = fmaxf(mx_a, s_red[row_group][c][g]);
      mx_b = fmaxf(mx_b, s_red[row_group][c][g + 8]);
    }
    // The tile holds an attended token (t0 < hi), so the new maxima are finite; every warp of
    // the row group computes the same ones.
    const float new_a = fmaxf(m_a, mx_a);
    const float new_b = fmaxf(m_b, mx_b);
    if (new_a > m_a || new_b > m_b) {
      const float alpha_a = fast_exp2(m_a - new_a);
      const float alpha_b = fast_exp2(m_b - new_b);
      l_a *= alpha_a;
      l_b *= alpha_b;
#pragma unroll
      for (int j = 0; j < kON; ++j) {
        o[j][0] *= alpha_a;
        o[j][1] *= alpha_a;
        o[j][2] *= alpha_b;
        o[j][3] *= alpha_b;
      }
      m_a = new_a;
      m_b = new_b;
    }
    // P (bf16) into the row group's tile: row g / g + 8, tile column col * kWT + 8j + 2t.
#pragma unroll
    for (int j = 0; j < kSN; ++j) {
      const float p0 = fast_exp2(s[j][0] - m_a);
      const float p1 = fast_exp2(s[j][1] - m_a);
      const float p2 = fast_exp2(s[j][2] - m_b);
      const float p3 = fast_exp2(s[j][3] - m_b);
      l_a += p0 + p1;
      l_b += p2 + p3;
      const int pc = col * kWT + 8 * j + 2 * t;
      *reinterpret_cast<uint32_t*>(p_rows + g * kPPitch + pc) = pack2<DType::kBF16>(p0, p1);
      *reinterpret_cast<uint32_t*>(p_rows + (g + 8) * kPPitch + pc) = pack2<DType::kBF16>(p2, p3);
    }
    named_barrier_sync(bar_id, kRowThreads);  // the row group's P complete

    // O += P V: P's k-chunks of 16 tokens; V = this warp's kWC channels of the same rows.
    const T* v_cols = ks + col * kWC;
#pragma unroll
    for (int kt = 0; kt < kT / 16; ++kt) {
      uint32_t pa[4];
      ldmatrix_x4(pa, p_rows + (mr + (mi & 1) * 8) * kPPitch + 16 * kt + (mi >> 1) * 8);
      const T* v_rows = v_cols + (16 * kt + (mi & 1) * 8 + mr) * kPitch + (mi >> 1) * 8;
#pragma unroll
      for (int cc = 0; cc < kWC / 16; ++cc) {
        // Matrices: (tokens 0-7, channels 16cc..+7), (8-15, 16cc..), (0-7, 16cc+8..),
        // (8-15, 16cc+8..), transposed -> b0, b1 of n-tile 2cc, then of 2cc + 1.
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_rows + 16 * cc);
        mma_16816<DType::kBF16>(o[2 * cc], pa, b[0], b[1]);
        mma_16816<DType::kBF16>(o[2 * cc + 1], pa, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

  // Row sums: the 4 lanes of a row, then the row group's column parts.
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  if (t == 0) {
    s_sum[row_group][col][g] = l_a;
    s_sum[row_group][col][g + 8] = l_b;
  }
  __syncthreads();
  l_a = 0.0f;
  l_b = 0.0f;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    l_a += s_sum[row_group][c][g];
    l_b += s_sum[row_group][c][g + 8];
  }
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f;
  const float inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  const int head_a = head0 + 16 * row_group + g;
  const int head_b = head_a + 8;
  const DecodeKernelArgs& out = a.out;
  const int ch0 = col * kWC + 2 * t;
  if (out.partial_o == nullptr) {
    T* o_seq = static_cast<T*>(out.o) + seq * out.o_seq_stride;
    T* row_a = o_seq + static_cast<int64_t>(head_a) * kMlaValueDim + ch0;
    T* row_b = o_seq + static_cast<int64_t>(head_b) * kMlaValueDim + ch0;
#pragma unroll
    for (int j = 0; j < kON; ++j) {
      *reinterpret_cast<uint32_t*>(row_a + 8 * j) =
          pack2<DType::kBF16>(o[j][0] * inv_a, o[j][1] * inv_a);
      *reinterpret_cast<uint32_t*>(row_b + 8 * j) =
          pack2<DType::kBF16>(o[j][2] * inv_b, o[j][3] * inv_b);
    }
    if (col == 0 && t == 0 && out.lse_ln != nullptr) {
      const int64_t idx = static_cast<int64_t>(seq) * out.num_qo_heads;
      out.lse_ln[idx + head_a] = row_lse2(m_a, l_a) * 0.69314718055994531f;
      out.lse_ln[idx + head_b] = row_lse2(m_b, l_b) * 0.69314718055994531f;
    }
    return;
  }
  const int64_t idx = (static_cast<int64_t>(split) * out.num_seqs + seq) * out.num_qo_heads;
  float* po_a = out.partial_o + (idx + head_a) * kMlaValueDim + ch0;
  float* po_b = out.partial_o + (idx + head_b) * kMlaValueDim + ch0;
#pragma unroll
  for (int j = 0; j < kON; ++j) {
    *reinterpret_cast<float2*>(po_a + 8 * j) = make_float2(o[j][0] * inv_a, o[j][1] * inv_a);
    *reinterpret_cast<float2*>(po_b + 8 * j) = make_float2(o[j][2] * inv_b, o[j][3] * inv_b);
  }
  if (col == 0 && t == 0) {
    out.partial_lse[idx + head_a] = row_lse2(m_a, l_a);
    out.partial_lse[idx + head_b] = row_lse2(m_b, l_b);
  }
  if (!a.merge_in_kernel) return;
  int32_t* counter = out.split_counters + static_cast<int64_t>(seq) * gridDim.y + blockIdx.y;
  if (!last_split_done(counter, out.merge_splits)) return;
  // The merge runs on 4 warps (kDecodeThreads), one head per warp at a time.
  if (tid < kDecodeThreads) {
    merge_split_rows<DType::kBF16, kMlaValueDim>(out, seq, head0, Shape::kHeads);
  }
}

// The merge of a split launch whose partials are too many for one block per head tile (64 heads x
// 66 splits is 8.6 MB): grid (num_seqs, num_heads), kMergeThreads threads, one (sequence, head)
// per block. Warp 0 turns the splits' log-sum-exps into weights in shared memory; then thread i
// sums channels 4i .. 4i + 3 over the splits (16-byte loads through L2: other blocks wrote them).
inline constexpr int kMlaMergeThreads = kMlaValueDim / 4;

__global__ void __launch_bounds__(kMlaMergeThreads)
    mla_merge_kernel(const __grid_constant__ MlaKernelArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const DecodeKernelArgs& out = a.out;
  const int seq = blockIdx.x;
  const int head = blockIdx.y;
  const int64_t idx0 = static_cast<int64_t>(seq) * out.num_qo_heads + head;
  const int64_t stride = static_cast<int64_t>(out.num_seqs) * out.num_qo_heads;
  const int splits = out.merge_splits;
  __shared__ float s_w[kMaxDecodeSplits];
  __shared__ float s_inv;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    constexpr int kLaneSplits = kMaxDecodeSplits / 32;
    float w[kLaneSplits];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kLaneSplits; ++i) {
      const int z = lane + 32 * i;
      w[i] = z < splits ? __ldcg(out.partial_lse + z * stride + idx0) : -INFINITY;
      mx = fmaxf(mx, w[i]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneSplits; ++i) {
      w[i] = mx == -INFINITY || w[i] == -INFINITY ? 0.0f : fast_exp2(w[i] - mx);
      sum += w[i];
      const int z = lane + 32 * i;
      if (z < splits) s_w[z] = w[i];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) {
      s_inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      if (out.lse_ln != nullptr) {
        out.lse_ln[idx0] = (sum > 0.0f ? mx + log2f(sum) : -INFINITY) * 0.69314718055994531f;
      }
    }
  }
  __syncthreads();
  const float* po = out.partial_o + idx0 * kMlaValueDim + 4 * threadIdx.x;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
  for (int z = 0; z < splits; ++z) {
    const float wz = s_w[z];
    const float4 x = __ldcg(reinterpret_cast<const float4*>(po + z * stride * kMlaValueDim));
    acc.x = fmaf(wz, x.x, acc.x);
    acc.y = fmaf(wz, x.y, acc.y);
    acc.z = fmaf(wz, x.z, acc.z);
    acc.w = fmaf(wz, x.w, acc.w);
  }
  const float inv = s_inv;
  __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(out.o) + seq * out.o_seq_stride +
                       static_cast<int64_t>(head) * kMlaValueDim + 4 * threadIdx.x;
  const uint2 packed = make_uint2(pack2<DType::kBF16>(acc.x * inv, acc.y * inv),
                                  pack2<DType::kBF16>(acc.z * inv, acc.w * inv));
  *reinterpret_cast<uint2*>(dst) = packed;
}

}  // namespace strata::cuda::detail

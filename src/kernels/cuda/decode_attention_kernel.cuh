#pragma once
// Device code of paged decode attention on the tensor cores (docs/kernels.md has the design and
// the numbers). Included only by the launcher (decode_attention_launch.cuh).
//
// Work decomposition. A thread block of 4 warps owns one (sequence, KV head, query-head tile,
// split). The query heads of the tile (up to 16, the M dimension of mma.sync m16n8k16; 8 when the
// group has at most 8) are the rows of every product, so each K/V byte is read once for all of
// them. The block's token range is cut into tiles of kTileTokens (16) tokens aligned to 16
// positions; warp w takes tiles w, w + 4, ..., keeps its own online softmax (FlashAttention-2's,
// in log2 units) and computes S = Q K^T and O += P V with mma.sync, fragments loaded by ldmatrix.
// The four warps' states are merged through shared memory at the end.
//
// Why tensor cores for one query token: on CUDA cores every K/V element costs a conversion, one
// FMA per query head and a share of a shuffle reduction, about 4 instructions per byte of KV, which
// kept the first kernel at 0.8-0.9 of the copy bandwidth with the SMs 67% busy; here a 16-token
// tile of head dim 128 (8 KiB of K and V) takes 32 mma, 16 ldmatrix and a few dozen other
// instructions per warp, so the loads alone set the pace.
//
// Loads. Each warp copies its own tiles with cp.async into a private ring of kStages buffers in
// shared memory (rows padded by 16 bytes, so the 8 row addresses of an ldmatrix hit 8 distinct
// bank groups) and needs only __syncwarp, no block barrier; kStages - 1 tiles stay in flight while
// one is computed. Block ids of the next tile are loaded one iteration ahead. Tokens past the end
// are zero-filled (never read) and masked, tokens before a sliding window's start masked.
//
// Split-KV: with num_splits > 1, split z covers [base + z * chunk, base + (z + 1) * chunk), base =
// the attended range's start rounded down to 16, chunk a multiple of 16 (the last split runs to
// the end, so a kv_len above the planner's bound is still correct), and writes a float partial
// output and its log-sum-exp to the workspace; the last of a tile's splits to finish merges them
// (decode_merge.cuh), so no second kernel is launched.
//
// Quantized caches (FP8 E4M3 / E5M2, INT8; kKvDType != kQDType). The ring holds codes (half the
// bytes of a BF16 tile) and, for INT8, the tile's 16 K and 16 V fp16 scales. The products run in
// fp16 (every code is exact in fp16; Q is converted once, saturated) and each lane builds its mma
// operands straight from the codes with 16-byte shared loads and a few conversions, with no
// ldmatrix and no staging copy. That needs two permutations the result does not see:
//   - Q K^T sums over channels, so any channel order shared by Q and K gives the same scores. Lane
//     (g, t) reads K rows g and g + 8 at bytes [t * D/4, (t + 1) * D/4): the word of k-chunk c
//     holds channels t * D/4 + 4c .. + 3, which act as the fragment's channels 16c + 2t, +1
//     (b0) and 16c + 2t + 8, +9 (b1); Q's fragment is loaded in the same order.
//   - O's n-tile j, column n is output channel (D/8) n + j, so lane (g, t) needs channels
//     (D/8) g .. + D/8 of V rows 2t, 2t + 1, 2t + 8, 2t + 9 (the tokens of its P fragment): four
//     loads and a byte transpose (prmt) give every n-tile's b0, b1. Its accumulators then hold
//     output channels (D/8) 2t .. and (D/8) (2t + 1) .. contiguously, written out in order.
// Token rows. With at most 8 query heads per tile (kRows 8) half of every m16 product above would
// be zero rows, so codes tiles swap the roles: S^T = K Q^T takes the tile's 16 tokens as the M
// dimension and the heads as N (lane (g, t): tokens g, g + 8 of heads 2t, 2t + 1), each head's
// softmax reduces across the 8 lanes of g, the probabilities' two 8 x 8 halves are transposed in
// registers (movmatrix) into the B fragment of O^T += V^T P^T, whose M dimension is 16 output
// channels. The loads and code conversions are the same words as above; the mma count and the
// accumulators halve (16 mma per tile instead of 32, 32 floats of O instead of 64).
// FP8's k_scale is folded into scale_log2 and v_scale into the output (out_scale); INT8 scales
// multiply each token's scores (K) and probabilities before P V (V): columns in the 16-head
// layout, rows in token-row tiles. Q over FP8 and INT8 caches is rounded to codes as prefill
// rounds it (query_codes.cuh); INT8 multiplies the integer codes and each query row's scale joins
// scale_log2 for that row. The sums and the softmax statistics stay exact functions of the codes.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/decode_merge.cuh"
#include "kernels/cuda/query_codes.cuh"
#include "kernels/cuda/kv_codes.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

template <DType kKvDType, int kHeadDim>
struct DecodeShape {
  static constexpr bool kI4 = kKvDType == DType::kI4;
  static constexpr bool kQuant = is_quantized_kv(kKvDType) || kI4;
  static constexpr int kWarps = kDecodeThreads / 32;
  static constexpr int kTileTokens = 16;
  // Three buffers per warp (two tiles in flight) for head dims up to 128: two blocks per SM. Two
  // buffers (three blocks per SM) and four (one) measured slower overall on an H200 GPU
  // (docs/kernels.md). Head dim 256, whose tiles are twice as large, keeps two. Code tiles are
  // half as large: FP8 and INT8 keep three buffers, which with the token-row tiles' ~96
  // registers is four blocks per SM (measured against four buffers, three blocks: 0.54x BF16
  // against 0.58x at 64 x 4K); INT4's stages also hold statistics and keep four.
  static constexpr int kStages = kI4 ? 4 : (kQuant ? 3 : (kHeadDim <= 128 ? 3 : 2));
  static constexpr int kPitch = kHeadDim + 8;  // 16-bit KV: elements per shared-memory row
  static constexpr int kTileElems = kTileTokens * kPitch;
  // Codes: bytes per row. The pitches keep each quarter-warp's 16-byte loads on distinct banks
  // (K: rows g, g + 1 at byte t * D/4; V: rows 2t.. at byte g * D/8).
  // INT4 rows are D/2 bytes: K at pitch D/2 (a quarter-warp's 16-byte loads, rows g, g + 1 at
  // byte t * D/8, cover 128 distinct bytes), V at D/2 + 16 (rows 2t at byte g * D/16).
  static constexpr int kKPitch = kI4 ? kHeadDim / 2 : (kHeadDim == 64 ? 64 : kHeadDim + 16);
  static constexpr int kVPitch = kI4 ? kHeadDim / 2 + 16 : kHeadDim + 16;
  // INT8: 16 K and 16 V scales. INT4: K's scales and zero points of the tile's two 8-token
  // halves ([2][2][D] fp16; one block when block_size >= 16, then only half 0 is loaded), then
  // V's 16 scales and 16 zero points.
  static constexpr int kKStatHalf = 2 * kHeadDim;  // fp16 per half: scales, then zero points
  static constexpr int kScaleBytes =
      kKvDType == DType::kI8 ? 2 * kTileTokens * 2 : (kI4 ? 2 * kKStatHalf * 2 + 2 * kTileTokens * 2 : 0);
  static constexpr int kStageBytes =
      kQuant ? kTileTokens * (kKPitch + kVPitch) + kScaleBytes
             : 2 * kTileElems * static_cast<int>(sizeof(uint16_t));
  static constexpr size_t kPipelineBytes = static_cast<size_t>(kWarps) * kStages * kStageBytes;
  static constexpr int kMergePitch = kHeadDim + 4;  // floats; rows 16 bytes out of bank step
  static constexpr size_t kMergeBytes = static_cast<size_t>(kWarps) * 16 * kMergePitch * 4;
  static constexpr size_t kSmemBytes = kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes;
  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of 16");
  static_assert(kTileTokens * (kHeadDim / 8) % 32 == 0, "whole vectors per lane");
  static_assert(!kQuant || kHeadDim == 64 || kHeadDim == 128, "quantized KV: head dim 64 or 128");
  static_assert(kStageBytes % 16 == 0);
};

// Lane-level operand pieces of a codes tile, shared by the two layouts (header comment): the
// 16-head path's B fragments and the token-row tiles' A fragments are the same words.
//
// K: one row's code words for lane t, its D/4 channels in the permuted order (word c = k-chunk c).
template <DType kKvDType, int kHeadDim>
__device__ __forceinline__ void k_code_words(const uint8_t* row, int t,
                                             uint32_t (&kw)[kHeadDim / 16]) {
  if constexpr (kKvDType == DType::kI4) {
    load_int4_row<kHeadDim / 8>(row + t * (kHeadDim / 8), kw);
  } else {
#pragma unroll
    for (int v = 0; v < kHeadDim / 64; ++v) {
      const uint4 x = *reinterpret_cast<const uint4*>(row + t * (kHeadDim / 4) + 16 * v);
      kw[4 * v] = x.x;
      kw[4 * v + 1] = x.y;
      kw[4 * v + 2] = x.z;
      kw[4 * v + 3] = x.w;
    }
  }
}

// K: k-chunk word w as two fp16 pairs; INT4 dequantized with its channels' statistics (stat:
// the lane's scales for this chunk, zero points kHeadDim further).
template <DType kKvDType, int kHeadDim>
__device__ __forceinline__ void k_chunk_f16(uint32_t w, const uint16_t* stat, uint32_t& lo,
                                            uint32_t& hi) {
  if constexpr (kKvDType == DType::kI4) {
    const uint2 sc = *reinterpret_cast<const uint2*>(stat);
    const uint2 zp = *reinterpret_cast<const uint2*>(stat + kHeadDim);
    u4codes4_to_f16x2(w, lo, hi);
    lo = hfma2_bits(lo, sc.x, zp.x);
    hi = hfma2_bits(hi, sc.y, zp.y);
  } else {
    codes4_to_f16x2<kKvDType>(w, lo, hi);
  }
}

// V: rows 2t, 2t + 1, 2t + 8, 2t + 9 (the tokens of lane (g, t)'s probabilities), lane g's D/8
// channels.
template <DType kKvDType, int kHeadDim>
__device__ __forceinline__ void v_code_words(const uint8_t* vs, int g, int t,
                                             uint32_t (&vw)[4][kHeadDim / 32]) {
  using Shape = DecodeShape<kKvDType, kHeadDim>;
  constexpr int kVBytes = kHeadDim / 8;  // channels per lane
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint8_t* row = vs + (2 * t + (r & 1) + 8 * (r >> 1)) * Shape::kVPitch;
    if constexpr (kKvDType == DType::kI4) {
      load_int4_row<kHeadDim / 16>(row + g * (kHeadDim / 16), vw[r]);
    } else if constexpr (kVBytes == 16) {
      const uint4 x = *reinterpret_cast<const uint4*>(row + g * kVBytes);
      vw[r][0] = x.x;
      vw[r][1] = x.y;
      vw[r][2] = x.z;
      vw[r][3] = x.w;
    } else {
      const uint2 x = *reinterpret_cast<const uint2*>(row + g * kVBytes);
      vw[r][0] = x.x;
      vw[r][1] = x.y;
    }
  }
}

// V: the channel pairs of word w: b0[e] = channel (D/8) g + 4w + e at tokens 2t, 2t + 1, b1[e]
// at 2t + 8, 2t + 9 (the byte transpose pairs each channel's two tokens). INT4 dequantizes with
// the four tokens' statistics (vstat: the stage's V scales, then zero points kTileTokens on).
template <DType kKvDType, int kHeadDim>
__device__ __forceinline__ void v_channel_pairs(const uint32_t (&vw)[4][kHeadDim / 32], int w,
                                                const uint16_t* vstat, int t, uint32_t (&b0)[4],
                                                uint32_t (&b1)[4]) {
  auto convert = [](uint32_t x, uint32_t& lo, uint32_t& hi) {
    if constexpr (kKvDType == DType::kI4) {
      u4codes4_to_f16x2(x, lo, hi);
    } else {
      codes4_to_f16x2<kKvDType>(x, lo, hi);
    }
  };
  convert(__byte_perm(vw[0][w], vw[1][w], 0x5140), b0[0], b0[1]);
  convert(__byte_perm(vw[0][w], vw[1][w], 0x7362), b0[2], b0[3]);
  convert(__byte_perm(vw[2][w], vw[3][w], 0x5140), b1[0], b1[1]);
  convert(__byte_perm(vw[2][w], vw[3][w], 0x7362), b1[2], b1[3]);
  if constexpr (kKvDType == DType::kI4) {
    constexpr int kT = DecodeShape<kKvDType, kHeadDim>::kTileTokens;
    const uint32_t s_lo = *reinterpret_cast<const uint32_t*>(vstat + 2 * t);
    const uint32_t s_hi = *reinterpret_cast<const uint32_t*>(vstat + 2 * t + 8);
    const uint32_t z_lo = *reinterpret_cast<const uint32_t*>(vstat + kT + 2 * t);
    const uint32_t z_hi = *reinterpret_cast<const uint32_t*>(vstat + kT + 2 * t + 8);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      b0[e] = hfma2_bits(b0[e], s_lo, z_lo);
      b1[e] = hfma2_bits(b1[e], s_hi, z_hi);
    }
  }
}

// One 16-token tile of codes with the tokens as the rows of both products (header comment,
// "Token rows"); lane (g, t) holds tokens g and g + 8 of the scores and heads 2t, 2t + 1.
// stats: the stage's INT8 scales or INT4 statistics; half_blocks: INT4 blocks of 8 tokens (the
// tile's second half has its own K statistics). o, m_*, l_*: the warp's state (heads 2t, 2t + 1).
template <DType kKvDType, int kHeadDim>
__device__ __forceinline__ void token_rows_tile(const uint8_t* ks, const uint8_t* vs,
                                                const uint16_t* stats, bool half_blocks,
                                                const uint32_t (&qf)[kHeadDim / 16][4],
                                                int tok_a, int tok_b, bool full, int begin, int hi,
                                                float scale_a, float scale_b,
                                                float (&o)[kHeadDim / 16][4],
                                                float& m_a, float& m_b, float& l_a, float& l_b) {
  using Shape = DecodeShape<kKvDType, kHeadDim>;
  constexpr int kT = Shape::kTileTokens;
  constexpr int kChunks = kHeadDim / 16;
  constexpr int kVBytes = kHeadDim / 8;  // V channels per lane
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;
  const int t = lane & 3;

  // S^T = K Q^T. Rows g, g + 8 of K, this lane's D/4 channels: the words and conversions of the
  // other layout's B fragment (the channel permutation above) make K's A fragment here, and Q's
  // row-g half of qf is the B fragment. Two accumulator chains, even and odd k-chunks.
  uint32_t kw[2][kChunks];
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    k_code_words<kKvDType, kHeadDim>(ks + (g + 8 * n) * Shape::kKPitch, t, kw[n]);
  }
  float acc[2][4] = {};
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    uint32_t lo[2], hi2[2];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const uint16_t* stat =  // INT4 only
          stats + (n == 1 && half_blocks ? Shape::kKStatHalf : 0) + t * (kHeadDim / 4) + 4 * c;
      k_chunk_f16<kKvDType, kHeadDim>(kw[n][c], stat, lo[n], hi2[n]);
    }
    const uint32_t af[4] = {lo[0], lo[1], hi2[0], hi2[1]};
    mma_16816<DType::kF16>(acc[c & 1], af, qf[c][0], qf[c][2]);
  }
  float s[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] = acc[0][e] + acc[1][e];
  if constexpr (kKvDType == DType::kI8) scale_token_rows(s, stats, g);  // K's
  const bool ok_a = full || (tok_a >= begin && tok_a < hi);
  const bool ok_b = full || (tok_b >= begin && tok_b < hi);
  // Heads 2t (s[0], s[2]) and 2t + 1 (s[1], s[3]), each by its scale.
  s[0] = ok_a ? s[0] * scale_a : -INFINITY;
  s[1] = ok_a ? s[1] * scale_b : -INFINITY;
  s[2] = ok_b ? s[2] * scale_a : -INFINITY;
  s[3] = ok_b ? s[3] * scale_b : -INFINITY;

  // Each head's maximum over the tile's 16 tokens: two per lane, then across the 8 lanes of g.
  float mx_a = fmaxf(s[0], s[2]);
  float mx_b = fmaxf(s[1], s[3]);
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
  }
  // Every tile holds an attended token, so the new maxima are finite.
  const float new_a = fmaxf(m_a, mx_a);
  const float new_b = fmaxf(m_b, mx_b);
  if (new_a > m_a || new_b > m_b) {
    const float alpha_a = fast_exp2(m_a - new_a);
    const float alpha_b = fast_exp2(m_b - new_b);
    l_a *= alpha_a;
    l_b *= alpha_b;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      o[j][0] *= alpha_a;
      o[j][1] *= alpha_b;
      o[j][2] *= alpha_a;
      o[j][3] *= alpha_b;
    }
    m_a = new_a;
    m_b = new_b;
  }
  float p[4] = {fast_exp2(s[0] - m_a), fast_exp2(s[1] - m_b), fast_exp2(s[2] - m_a),
                fast_exp2(s[3] - m_b)};
  l_a += p[0] + p[2];
  l_b += p[1] + p[3];
  if constexpr (kKvDType == DType::kI8) scale_token_rows(p, stats + kT, g);  // V's
  // P^T's B fragment (tokens 2t, 2t + 1 and 2t + 8, 2t + 9 of head g): the two 8 x 8 halves of
  // P (rows = tokens) transposed in registers.
  const uint32_t pb0 = movmatrix_trans(pack2<DType::kF16>(p[0], p[1]));
  const uint32_t pb1 = movmatrix_trans(pack2<DType::kF16>(p[2], p[3]));

  // O^T += V^T P^T. V rows 2t, 2t + 1, 2t + 8, 2t + 9, this lane's D/8 channels; the byte
  // transpose pairs each channel's two tokens, which is the A fragment's row: m-tile j's rows g
  // and g + 8 are channels (D/8) g + 2j and + 1.
  uint32_t vw[4][kVBytes / 4];
  v_code_words<kKvDType, kHeadDim>(vs, g, t, vw);
#pragma unroll
  for (int w = 0; w < kVBytes / 4; ++w) {
    uint32_t b0[4], b1[4];  // channel (D/8) g + 4w + e: tokens 2t, 2t + 1 / 2t + 8, 2t + 9
    v_channel_pairs<kKvDType, kHeadDim>(vw, w, stats + 2 * Shape::kKStatHalf, t, b0, b1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t af[4] = {b0[2 * h], b0[2 * h + 1], b1[2 * h], b1[2 * h + 1]};
      mma_16816<DType::kF16>(o[2 * w + h], af, pb0, pb1);
    }
  }
}

// Before pdl_wait: asks L2 for the K and V of the first kPrefetchTokens tokens of this block's
// split, one bulk prefetch per (block of the block table, K or V) by one thread each. The block
// table and the lengths are step inputs that no kernel of the step writes, and every token but
// the step's own was appended by earlier steps, so the addresses are final before the kernels
// ahead of this one finish, and the lines arrive while they do (L2 keeps the step's own token
// coherent: rope's append lands in L2 whether or not its line came first). At batch 1 a block's
// tiles otherwise wait on memory one after another after the wait; with a split of at most
// kPrefetchTokens (the planner's kMinSplitTokens) every tile is then read from L2. The cap keeps
// a full wave's prefetches (two blocks per SM) to a fraction of L2 in large batches.
inline constexpr int kPrefetchTokens = 128;

// Asks L2 to fetch bytes [gmem, gmem + bytes) from memory (Hopper's bulk prefetch; gmem 16-byte
// aligned, bytes a multiple of 16). A hint: nothing waits for it.
__device__ __forceinline__ void prefetch_l2_bulk(const void* gmem, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(gmem), "r"(bytes) : "memory");
#endif
}
static_assert(2 * (kPrefetchTokens / 8 + 1) <= kDecodeThreads, "a thread per block and K or V");

template <DType kKvDType, int kHeadDim>
__device__ __forceinline__ void prefetch_split_l2(const DecodeKernelArgs& a) {
  using KvT = std::conditional_t<DecodeShape<kKvDType, kHeadDim>::kQuant, uint8_t, uint16_t>;
  static_assert(kKvDType != DType::kI4, "INT4 rows are half a byte per channel");
  constexpr int kT = DecodeShape<kKvDType, kHeadDim>::kTileTokens;
  const SeqExtent ext =
      seq_extent(a.kv_indptr, a.kv_last_page_len, a.block_size, a.window_left, blockIdx.x);
  const int split = blockIdx.z;
  const int lo = (ext.begin & ~(kT - 1)) + split * a.chunk_tokens;
  const int split_hi =
      split == a.num_splits - 1 ? ext.kv_len : min(ext.kv_len, lo + a.chunk_tokens);
  const int hi = min(split_hi, lo + kPrefetchTokens);
  const int from = max(lo, ext.begin);
  if (hi <= from) return;
  const int first = from >> a.log2_block_size;
  const int num = ((hi - 1) >> a.log2_block_size) - first + 1;
  const int item = static_cast<int>(threadIdx.x);
  if (item >= 2 * num) return;
  const int logical = first + item / 2;
  const int tok_begin = max(from, logical << a.log2_block_size);
  const int tok_end = min(hi, (logical + 1) << a.log2_block_size);
  const int64_t page = a.kv_indices[ext.page_begin + logical];
  const KvT* base = static_cast<const KvT*>(item % 2 == 0 ? a.k_data : a.v_data);
  const int kv_head = blockIdx.y / a.q_tiles;
  const KvT* p = base + page * a.block_stride + kv_head * a.head_stride +
                 (tok_begin & (a.block_size - 1)) * a.token_stride;
  prefetch_l2_bulk(p, static_cast<uint32_t>((tok_end - tok_begin) * a.token_stride * sizeof(KvT)));
}

// kRows: query-head rows computed per tile, 8 (groups of up to 8 heads: the upper half of the
// m16 fragments is zero and skipped) or 16.
// kQDType: q and o (bf16 or fp16); kKvDType: the cache, kQDType itself or a quantized dtype.
template <DType kQDType, DType kKvDType, int kHeadDim, int kRows>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_attention_kernel(const __grid_constant__ DecodeKernelArgs a) {
  using Shape = DecodeShape<kKvDType, kHeadDim>;
  constexpr bool kQuant = Shape::kQuant;
  constexpr bool kI4 = Shape::kI4;
  static_assert(kQuant || kQDType == kKvDType);
  pdl_launch_dependents();
  if constexpr (!kI4) {
    if (a.part == kWholeRange) prefetch_split_l2<kKvDType, kHeadDim>(a);
  }
  pdl_wait();
  // The tensor-core input type: the cache's for 16-bit caches, fp16 for codes.
  constexpr DType kDType = kQuant ? DType::kF16 : kKvDType;
  using T = typename CudaType<kQDType>::type;  // q and o
  using KvT = std::conditional_t<kQuant, uint8_t, T>;
  constexpr int kWarps = Shape::kWarps;
  constexpr int kT = Shape::kTileTokens;
  constexpr int kStages = Shape::kStages;
  constexpr int kPitch = Shape::kPitch;
  constexpr int kChunks = kHeadDim / 16;   // k-chunks of Q K^T, pairs of n-tiles of P V
  constexpr int kDimTiles = kHeadDim / 8;  // n-tiles of O
  constexpr int kRowVecs = kHeadDim / 8;   // 8-float output vectors per row
  constexpr bool kUpper = kRows == 16;
  static_assert(kRows == 8 || kRows == 16);
  // Codes with at most 8 query heads: the tile's 16 tokens are the rows of both products (header
  // comment, "Token rows"), O^T's rows its channels: half the mma and half the accumulators.
  constexpr bool kTokRows = kQuant && !kUpper;
  constexpr int kOTiles = kTokRows ? kHeadDim / 16 : kDimTiles;  // accumulator tiles of O (O^T)

  const int seq = blockIdx.x;
  const int kv_head = blockIdx.y / a.q_tiles;
  const int g_begin = (blockIdx.y % a.q_tiles) * kRows;
  const int g_count = min(kRows, a.group_size - g_begin);
  const int qo_head0 = kv_head * a.group_size + g_begin;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;
  const int t = lane & 3;

  SeqExtent ext = seq_extent(a.kv_indptr, a.kv_last_page_len, a.block_size, a.window_left, seq);
  const int32_t* pages = a.kv_indices + ext.page_begin;
  int first_page = 0;  // lowest logical block a load may touch
  if (a.part != kWholeRange) {
    const int split_at =
        ext.kv_len > 0 ? int4_keys(ext.kv_len - 1, a.block_size, a.newest_blocks) : 0;
    if (a.part == kInt4Part) {
      ext.kv_len = split_at > ext.begin ? split_at : 0;  // no tile without an attended token
    } else {
      ext.begin = max(ext.begin, split_at);
      first_page = a.newest_first_block[seq];
      pages = a.kv_indices + a.newest_indptr[seq] - first_page;
    }
  }
  const int lo = (ext.begin & ~(kT - 1)) + split * a.chunk_tokens;
  const int hi = split == a.num_splits - 1 ? ext.kv_len : min(ext.kv_len, lo + a.chunk_tokens);
  const int num_tiles = hi > lo ? (hi - lo + kT - 1) / kT : 0;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;

  // Q fragments (rows = query heads of the tile; zeros past g_count).
  const T* q_seq = static_cast<const T*>(a.q) + seq * a.q_seq_stride;
  auto q_word = [&](int row, int col) -> uint32_t {
    if (row >= g_count) return 0u;
    return *reinterpret_cast<const uint32_t*>(q_seq + (qo_head0 + row) * kHeadDim + col);
  };
  // FP8 and INT8 caches: each head's row rounded to e4m3 or int8 codes as the prefill multiplies
  // it (query_codes.cuh); this lane holds channels t * D/4 .. + D/4 of rows g and g + 8.
  constexpr bool kRoundQ = kRoundsQuery<kKvDType>;
  QueryScale qs_a, qs_b;
  if constexpr (kRoundQ) {
    float amax_a = 0.0f, amax_b = 0.0f;
#pragma unroll
    for (int w = 0; w < kHeadDim / 8; ++w) {
      amax_a = fmaxf(amax_a, abs_max2<kQDType>(q_word(g, t * (kHeadDim / 4) + 2 * w)));
      if constexpr (kUpper) {
        amax_b = fmaxf(amax_b, abs_max2<kQDType>(q_word(g + 8, t * (kHeadDim / 4) + 2 * w)));
      }
    }
    qs_a = query_scale<kKvDType>(amax_a);
    qs_b = query_scale<kKvDType>(amax_b);
  }
  // The scores' scale to log2 units for rows g and g + 8, or (token rows) heads 2t and 2t + 1:
  // INT8 multiplies Q's codes, so each row's Q scale joins it (head h's is lane 4h's, row g).
  float row_scale_a = a.scale_log2, row_scale_b = a.scale_log2;
  if constexpr (kKvDType == DType::kI8) {
    const float sa = qs_a.scale > 0.0f ? qs_a.scale : 1.0f;  // a row of zeros scores 0
    const float sb = qs_b.scale > 0.0f ? qs_b.scale : 1.0f;
    if constexpr (kTokRows) {
      row_scale_a = a.scale_log2 * __shfl_sync(0xffffffffu, sa, 8 * t);
      row_scale_b = a.scale_log2 * __shfl_sync(0xffffffffu, sa, 8 * t + 4);
    } else {
      row_scale_a = a.scale_log2 * sa;
      row_scale_b = a.scale_log2 * sb;
    }
  }
  auto q_f16 = [&](uint32_t pair, const QueryScale& qs) {
    if constexpr (kRoundQ) {
      return query_rounded_f16x2<kKvDType, kQDType>(pair, qs);
    } else {
      return to_f16x2<kQDType>(pair);
    }
  };
  uint32_t qf[kChunks][4];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if constexpr (kQuant) {  // channels in the permuted order of the code tiles, as fp16
      const int col = t * (kHeadDim / 4) + 4 * c;
      qf[c][0] = q_f16(q_word(g, col), qs_a);
      qf[c][1] = kUpper ? q_f16(q_word(g + 8, col), qs_b) : 0u;
      qf[c][2] = q_f16(q_word(g, col + 2), qs_a);
      qf[c][3] = kUpper ? q_f16(q_word(g + 8, col + 2), qs_b) : 0u;
    } else {
      qf[c][0] = q_word(g, 16 * c + 2 * t);
      qf[c][1] = kUpper ? q_word(g + 8, 16 * c + 2 * t) : 0u;
      qf[c][2] = q_word(g, 16 * c + 8 + 2 * t);
      qf[c][3] = kUpper ? q_word(g + 8, 16 * c + 8 + 2 * t) : 0u;
    }
  }

  float o[kOTiles][4];
#pragma unroll
  for (int j = 0; j < kOTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  // Softmax state of this lane's two query heads: rows g, g + 8 (16-bit KV, 16 heads), or
  // heads 2t, 2t + 1 (token rows; l then sums this lane's tokens only until the end).
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  const KvT* k_head = static_cast<const KvT*>(a.k_data) + kv_head * a.head_stride;
  const KvT* v_head = static_cast<const KvT*>(a.v_data) + kv_head * a.head_stride;
  const int in_block_mask = a.block_size - 1;

  extern __shared__ uint4 smem[];
  char* ring = reinterpret_cast<char*>(smem) + warp * kStages * Shape::kStageBytes;
  // 16-bit KV: K then V tiles of kTileElems. Codes: K [16][kKPitch], V [16][kVPitch], then for
  // INT8 the 16 K scales and the 16 V scales.
  auto k_buf = [&](int st) { return reinterpret_cast<KvT*>(ring + st * Shape::kStageBytes); };
  auto v_buf = [&](int st) {
    return reinterpret_cast<KvT*>(ring + st * Shape::kStageBytes +
                                  (kQuant ? kT * Shape::kKPitch : Shape::kTileElems * 2));
  };
  auto scale_buf = [&](int st) {
    return reinterpret_cast<uint16_t*>(ring + st * Shape::kStageBytes +
                                       kT * (Shape::kKPitch + Shape::kVPitch));
  };

  // Block ids of the two 8-token halves of the next tile to issue (block sizes are >= 8 and tiles
  // are 16-aligned, so a half never straddles blocks); indices clamped into the sequence.
  int next_page0 = 0, next_page1 = 0;
  auto load_pages = [&](int i) {
    const int t0 = lo + (warp + kWarps * i) * kT;
    const int last = ext.num_pages - 1;
    next_page0 = pages[min(max(t0 >> a.log2_block_size, first_page), last)];
    next_page1 = a.block_size >= kT
                     ? next_page0
                     : pages[min(max((t0 + 8) >> a.log2_block_size, first_page), last)];
  };
  auto issue = [&](int i) {
    const int st = i % kStages;
    const int t0 = lo + (warp + kWarps * i) * kT;
    // K/V rows: 16-byte vectors of codes or of 16-bit values; pitches in elements of KvT.
    constexpr int kVecElems = 16 / static_cast<int>(sizeof(KvT));
    constexpr int kVecs = (kI4 ? kHeadDim / 2 : kHeadDim) / kVecElems;
    static_assert(kT * kVecs % 32 == 0);
    constexpr int kKRow = kQuant ? Shape::kKPitch : kPitch;
    constexpr int kVRow = kQuant ? Shape::kVPitch : kPitch;
#pragma unroll
    for (int v = 0; v < kT * kVecs / 32; ++v) {
      const int idx = lane + 32 * v;
      const int r = idx / kVecs;
      const int c = idx % kVecs;
      const int tok = t0 + r;
      const bool ok = tok < hi;
      const int64_t off = static_cast<int64_t>(r < 8 ? next_page0 : next_page1) * a.block_stride +
                          (tok & in_block_mask) * a.token_stride + c * kVecElems;
      cp_async16_zfill(k_buf(st) + r * kKRow + c * kVecElems, ok ? k_head + off : k_head, ok);
      cp_async16_zfill(v_buf(st) + r * kVRow + c * kVecElems, ok ? v_head + off : v_head, ok);
    }
    if constexpr (kKvDType == DType::kI8) {
      // Lanes 0-3: K scales of tokens 0-7, 8-15, then V's; zeros past the end, so a masked
      // column never meets a stale scale.
      if (lane < 4) {
        const int half = lane & 1;
        const int tok = t0 + 8 * half;
        const int valid = min(max(hi - tok, 0), 8);
        const uint16_t* base = lane < 2 ? a.k_scales : a.v_scales;
        const int64_t off =
            static_cast<int64_t>(half == 0 ? next_page0 : next_page1) * a.scale_block_stride +
            kv_head * a.scale_head_stride + (tok & in_block_mask);
        cp_async16_prefix(scale_buf(st) + 8 * lane, valid > 0 ? base + off : base, 2 * valid);
      }
    }
    if constexpr (kI4) {
      // K's statistics: [half][scales, zeros][D], 16-byte vectors; the second half only when
      // blocks are 8 tokens (else both halves are one block's and half 0 serves both).
      constexpr int kStatVecs = Shape::kKStatHalf / 8;  // per half
      const int halves = a.block_size >= kT ? 1 : 2;
      for (int i = lane; i < halves * kStatVecs; i += 32) {
        const int half = i / kStatVecs;
        const int j = i % kStatVecs;
        const bool zero = j >= kStatVecs / 2;
        const uint16_t* base = zero ? a.k_zeros : a.k_scales;
        const int64_t off = static_cast<int64_t>(half == 0 ? next_page0 : next_page1) *
                                a.scale_block_stride +
                            kv_head * a.k_stat_head_stride + (j % (kStatVecs / 2)) * 8;
        cp_async16(scale_buf(st) + half * Shape::kKStatHalf + (zero ? kHeadDim : 0) +
                       (j % (kStatVecs / 2)) * 8,
                   base + off);
      }
      // V's: lanes 0-3 copy scales of tokens 0-7, 8-15, then zero points; zeros past the end.
      if (lane < 4) {
        const int half = lane & 1;
        const int tok = t0 + 8 * half;
        const int valid = min(max(hi - tok, 0), 8);
        const uint16_t* base = lane < 2 ? a.v_scales : a.v_zeros;
        const int64_t off =
            static_cast<int64_t>(half == 0 ? next_page0 : next_page1) * a.scale_block_stride +
            kv_head * a.scale_head_stride + (tok & in_block_mask);
        cp_async16_prefix(scale_buf(st) + 2 * Shape::kKStatHalf + 8 * lane,
                          valid > 0 ? base + off : base, 2 * valid);
      }
    }
  };

  if (my_tiles > 0) load_pages(0);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < my_tiles) {
      issue(i);
      if (i + 1 < my_tiles) load_pages(i + 1);
    }
    cp_async_commit();
  }

  // ldmatrix row addresses: lane l gives row (l & 7) of matrix (l >> 3).
  const int mi = lane >> 3;
  const int mr = lane & 7;
  for (int i = 0; i < my_tiles; ++i) {
    const int ahead = i + kStages - 1;
    if (ahead < my_tiles) {
      issue(ahead);
      if (ahead + 1 < my_tiles) load_pages(ahead + 1);
    }
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();

    const int st = i % kStages;
    const KvT* ks = k_buf(st);
    const KvT* vs = v_buf(st);
    const int t0 = lo + (warp + kWarps * i) * kT;
    const bool full = t0 >= ext.begin && t0 + kT <= hi;
    if constexpr (kTokRows) {
      token_rows_tile<kKvDType, kHeadDim>(ks, vs, scale_buf(st), a.block_size < kT, qf,
                                          t0 + g, t0 + g + 8, full, ext.begin, hi, row_scale_a,
                                          row_scale_b, o, m_a, m_b, l_a, l_b);
    } else {
      // S = Q K^T: n-tile 0 = tokens 0..7, 1 = tokens 8..15.
      float s[2][4] = {};
      if constexpr (kQuant) {
        // Rows g and g + 8, this lane's D/4 channels in the permuted order above (INT4: unpacked
        // into byte codes in that order and dequantized in fp16 with their channels' statistics,
        // code * s + z, one rounding), then the products.
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          uint32_t kw[kChunks];
          k_code_words<kKvDType, kHeadDim>(ks + (g + 8 * n) * Shape::kKPitch, t, kw);
          const uint16_t* stat =  // INT4 only
              scale_buf(st) + (n == 1 && a.block_size < kT ? Shape::kKStatHalf : 0) +
              t * (kHeadDim / 4);
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
            uint32_t b0, b1;
            k_chunk_f16<kKvDType, kHeadDim>(kw[c], stat + 4 * c, b0, b1);
            mma_16816<kDType>(s[n], qf[c], b0, b1);
          }
        }
        if constexpr (kKvDType == DType::kI8) scale_columns(s, scale_buf(st), t);  // K's
      } else {
        // Matrices: (tokens 0-7, channels 16c..+7), (0-7, 16c+8..), (8-15, 16c..),
        // (8-15, 16c+8..) -> b0, b1 of n-tile 0, then 1.
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          uint32_t b[4];
          ldmatrix_x4(b, ks + ((mi >> 1) * 8 + mr) * kPitch + 16 * c + (mi & 1) * 8);
          mma_16816<kDType>(s[0], qf[c], b[0], b[1]);
          mma_16816<kDType>(s[1], qf[c], b[2], b[3]);
        }
      }

#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int tok = t0 + 8 * n + 2 * t + (e & 1);
          const bool ok = full || (tok >= ext.begin && tok < hi);
          s[n][e] = ok ? s[n][e] * (e < 2 ? row_scale_a : row_scale_b) : -INFINITY;
        }
      }
      float mx_a = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
      float mx_b = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
        if constexpr (kUpper) mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
      }
      // Every tile holds an attended token, so the new maxima are finite; the accumulator is
      // rescaled only when a row's maximum moved.
      const float new_a = fmaxf(m_a, mx_a);
      const float new_b = kUpper ? fmaxf(m_b, mx_b) : 0.0f;
      if (new_a > m_a || (kUpper && new_b > m_b)) {
        const float alpha_a = fast_exp2(m_a - new_a);
        const float alpha_b = kUpper ? fast_exp2(m_b - new_b) : 1.0f;
        l_a *= alpha_a;
        l_b *= alpha_b;
#pragma unroll
        for (int j = 0; j < kDimTiles; ++j) {
          o[j][0] *= alpha_a;
          o[j][1] *= alpha_a;
          if constexpr (kUpper) {
            o[j][2] *= alpha_b;
            o[j][3] *= alpha_b;
          }
        }
        m_a = new_a;
        if constexpr (kUpper) m_b = new_b;
      }
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][0] = fast_exp2(s[n][0] - m_a);
        s[n][1] = fast_exp2(s[n][1] - m_a);
        l_a += s[n][0] + s[n][1];
        if constexpr (kUpper) {
          s[n][2] = fast_exp2(s[n][2] - m_b);
          s[n][3] = fast_exp2(s[n][3] - m_b);
          l_b += s[n][2] + s[n][3];
        }
      }
      // V's column scales, after l took the sums.
      if constexpr (kKvDType == DType::kI8) scale_columns(s, scale_buf(st) + kT, t);
      uint32_t pf[4];
      pf[0] = pack2<kDType>(s[0][0], s[0][1]);
      pf[1] = kUpper ? pack2<kDType>(s[0][2], s[0][3]) : 0u;
      pf[2] = pack2<kDType>(s[1][0], s[1][1]);
      pf[3] = kUpper ? pack2<kDType>(s[1][2], s[1][3]) : 0u;
      if constexpr (kQuant) {
        // O += P V: rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1), this lane's D/8 channels; the
        // byte transpose pairs the two tokens of each channel, channel j feeding n-tile j (INT4:
        // each pair dequantized with its two tokens' statistics).
        constexpr int kVBytes = kHeadDim / 8;
        uint32_t vw[4][kVBytes / 4];
        v_code_words<kKvDType, kHeadDim>(vs, g, t, vw);
#pragma unroll
        for (int w = 0; w < kVBytes / 4; ++w) {
          uint32_t b0[4], b1[4];
          v_channel_pairs<kKvDType, kHeadDim>(vw, w, scale_buf(st) + 2 * Shape::kKStatHalf, t,
                                              b0, b1);
#pragma unroll
          for (int e = 0; e < 4; ++e) mma_16816<kDType>(o[4 * w + e], pf, b0[e], b1[e]);
        }
      } else {
        // O += P V. Matrices: (tokens 0-7, channels 16c..+7), (8-15, 16c..), (0-7, 16c+8..),
        // (8-15, 16c+8..), transposed -> b0, b1 of n-tile 2c, then of 2c + 1.
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vs + ((mi & 1) * 8 + mr) * kPitch + 16 * c + (mi >> 1) * 8);
          mma_16816<kDType>(o[2 * c], pf, b[0], b[1]);
          mma_16816<kDType>(o[2 * c + 1], pf, b[2], b[3]);
        }
      }
    }
    __syncwarp();  // the buffer is refilled kStages - 1 iterations on
  }
  cp_async_wait<0>();

  // Row sums: over the 4 lanes of a row, or (token rows) over the 8 lanes of a head pair.
#pragma unroll
  for (int off = kTokRows ? 4 : 1; off < (kTokRows ? 32 : 4); off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    if constexpr (kUpper || kTokRows) l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }

  // Merge the warps through shared memory (the rings are free once every warp is past its loop).
  __syncthreads();
  float* s_o = reinterpret_cast<float*>(smem);  // [kWarps][16][kMergePitch]
  __shared__ float s_m[kWarps][16];
  __shared__ float s_l[kWarps][16];
  constexpr int kMp = Shape::kMergePitch;
  if constexpr (kTokRows) {
    // Accumulator (j, e) is head 2t + (e & 1), channel (D/8) g + 2j + (e >> 1).
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float* row = &s_o[(warp * 16 + 2 * t + hh) * kMp + (kHeadDim / 8) * g];
#pragma unroll
      for (int q = 0; q < kOTiles / 2; ++q) {
        *reinterpret_cast<float4*>(row + 4 * q) =
            make_float4(o[2 * q][hh], o[2 * q][2 + hh], o[2 * q + 1][hh], o[2 * q + 1][2 + hh]);
      }
    }
  } else if constexpr (kQuant) {
    // Accumulator (j, e) is output channel (D/8) (2t + (e & 1)) + j (the permutation above).
    constexpr int kVBytes = kHeadDim / 8;
#pragma unroll
    for (int j = 0; j < kDimTiles; j += 4) {
#pragma unroll
      for (int e = 0; e < (kUpper ? 4 : 2); ++e) {
        const int row = warp * 16 + g + (e >= 2 ? 8 : 0);
        *reinterpret_cast<float4*>(&s_o[row * kMp + kVBytes * (2 * t + (e & 1)) + j]) =
            make_float4(o[j][e], o[j + 1][e], o[j + 2][e], o[j + 3][e]);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) {
      *reinterpret_cast<float2*>(&s_o[(warp * 16 + g) * kMp + 8 * j + 2 * t]) =
          make_float2(o[j][0], o[j][1]);
      if constexpr (kUpper) {
        *reinterpret_cast<float2*>(&s_o[(warp * 16 + g + 8) * kMp + 8 * j + 2 * t]) =
            make_float2(o[j][2], o[j][3]);
      }
    }
  }
  if (kTokRows && g == 0) {
    s_m[warp][2 * t] = m_a;
    s_l[warp][2 * t] = l_a;
    s_m[warp][2 * t + 1] = m_b;
    s_l[warp][2 * t + 1] = l_b;
  } else if (!kTokRows && t == 0) {
    s_m[warp][g] = m_a;
    s_l[warp][g] = l_a;
    if constexpr (kUpper) {
      s_m[warp][g + 8] = m_b;
      s_l[warp][g + 8] = l_b;
    }
  }
  __syncthreads();

  // One thread per (query head, 8 channels).
  for (int item = threadIdx.x; item < g_count * kRowVecs; item += kDecodeThreads) {
    const int row = item / kRowVecs;
    const int c = item % kRowVecs;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w][row]);
    float acc[8] = {};
    float l_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wgt = s_m[w][row] == -INFINITY ? 0.0f : fast_exp2(s_m[w][row] - m_all);
      l_all += wgt * s_l[w][row];
      const float4* src = reinterpret_cast<const float4*>(&s_o[(w * 16 + row) * kMp + c * 8]);
      const float4 x0 = src[0];
      const float4 x1 = src[1];
      acc[0] += wgt * x0.x;
      acc[1] += wgt * x0.y;
      acc[2] += wgt * x0.z;
      acc[3] += wgt * x0.w;
      acc[4] += wgt * x1.x;
      acc[5] += wgt * x1.y;
      acc[6] += wgt * x1.z;
      acc[7] += wgt * x1.w;
    }
    const float inv_l = l_all > 0.0f ? a.out_scale / l_all : 0.0f;
    const float lse2 = row_lse2(m_all, l_all);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= inv_l;
    const int head = qo_head0 + row;
    if (a.partial_o == nullptr) {
      T* out = static_cast<T*>(a.o) + seq * a.o_seq_stride + head * kHeadDim;
      *reinterpret_cast<uint4*>(out + c * 8) = pack8<kQDType>(acc);
      if (c == 0) {
        const int64_t idx = static_cast<int64_t>(seq) * a.num_qo_heads + head;
        if (a.lse_ln != nullptr) a.lse_ln[idx] = lse2 * 0.69314718055994531f;
        if (a.lse_log2 != nullptr) a.lse_log2[idx] = lse2;
      }
    } else {
      const int64_t idx =
          (static_cast<int64_t>(a.split_base + split) * a.num_seqs + seq) * a.num_qo_heads + head;
      float4* dst = reinterpret_cast<float4*>(a.partial_o + idx * kHeadDim + c * 8);
      dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
      if (c == 0) a.partial_lse[idx] = lse2;
    }
  }
  if (a.partial_o == nullptr) return;
  int32_t* counter = a.split_counters + static_cast<int64_t>(seq) * gridDim.y + blockIdx.y;
  if (!last_split_done(counter, a.merge_splits)) return;
  merge_split_rows<kQDType, kHeadDim>(a, seq, qo_head0, g_count);
}

}  // namespace strata::cuda::detail

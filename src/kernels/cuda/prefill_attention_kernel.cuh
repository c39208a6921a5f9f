#pragma once
// Device code of the mma.sync paged prefill attention: over INT4's newest blocks, and over the
// whole key range of a 16-bit cache at head dim 256 (kWhole), where the warp-specialized kernel's
// 128-row Q and 128-key K/V tiles do not fit shared memory (docs/kernels.md); every other 16-bit,
// FP8, INT8 cache and INT4's int4 keys run prefill_ws_kernel.cuh. Included only through
// prefill_attention_run.cuh (and the kernel arguments by prefill_ws_kernel.cuh).
//
// A thread block of kWarps warps owns 16 * kWarps query rows: heads_per_block query heads of one
// KV group (a power of two dividing the group size, at most kWarps) times tokens_per_block
// consecutive query tokens, so every K/V tile it loads serves all of those heads. Warp w owns 16
// tokens of one head. K/V tiles of kKvTile tokens are copied from the paged pool into
// shared memory with cp.async, two stages deep (the next tile loads while this one is computed);
// rows are padded by 16 bytes so the 8 row addresses of every ldmatrix hit distinct bank groups.
// Each warp computes S = Q K^T and O += P V with mma.sync m16n8k16 (16-bit inputs, fp32
// accumulators; P rounded to the KV dtype, as FlashAttention-2 does), K fragments by ldmatrix and
// V fragments by ldmatrix.trans, and keeps the online softmax in registers in log2 units. Query row
// i of a sequence sits at position kv_len - q_len + i, so a chunk on a cached prefix and a decode
// token (q_len 1) are the same case. Blocks are launched longest-first (the last query tokens
// attend the most keys), which evens out the causal triangle's work across the waves.
//
// INT4 (KIVI): a query row at position p reads its int4 keys [0, int4_keys(p)) from the codes
// and the rest from the newest-blocks group's pool (docs/kv-quant.md "INT4"), so a launch runs
// twice: the int4 part (prefill_ws_kernel.cuh; it writes each row's log-sum-exp), then the
// newest part (this kernel's 16-bit instance over that pool by the group's block tables, per-row
// lower key bound), whose epilogue merges the two by their log-sum-exps.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codes.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/prefill_attention_impl.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

struct PrefillKernelArgs {
  const void* q;  // [num_q_tokens, num_qo_heads, head_dim]
  int64_t q_token_stride;
  void* o;  // [num_q_tokens, num_qo_heads, head_dim]
  int64_t o_token_stride;
  const int32_t* qo_indptr;         // [num_seqs + 1]
  const int32_t* kv_indptr;         // [num_seqs + 1]
  const int32_t* kv_indices;        // [nnz]
  const int32_t* kv_last_page_len;  // [num_seqs]
  const void* k_data;
  const void* v_data;
  int64_t block_stride;
  int64_t head_stride;
  int64_t token_stride;
  int32_t group_size;
  int32_t heads_per_block;   // query heads of one KV group per block (power of two)
  int32_t head_tiles;        // group_size / heads_per_block
  int32_t tokens_per_block;  // 16 * kWarps / heads_per_block
  int32_t block_size;
  int32_t log2_block_size;
  int32_t window_left;
  float scale_log2;  // sm_scale * log2(e), times the FP8 k_scale
  float out_scale;   // 1, or the FP8 v_scale
  // INT8 caches: per-token fp16 scales; INT4: its scales (PagedKvCacheView); null otherwise.
  const uint16_t* k_scales;
  const uint16_t* v_scales;
  int64_t scale_block_stride;
  int64_t scale_head_stride;
  // INT4 caches: the zero points and K's statistics stride (PagedKvCacheView). The kernel
  // decides which range it covers: the warp-specialized one the int4 keys, the mma.sync one the
  // newest blocks (kv_indices = the newest-blocks group's, by logical block through
  // newest_indptr / newest_first_block, as PagedKvLayout::block_at).
  const uint16_t* k_zeros;
  const uint16_t* v_zeros;
  int64_t k_stat_head_stride;
  int32_t newest_blocks;              // R
  const int32_t* newest_indptr;       // [num_seqs + 1] the newest-blocks group's kv_indptr
  const int32_t* newest_first_block;  // [num_seqs] its first_block
  // Two-part launches: [num_q_tokens, num_qo_heads] log-sum-exps (log2 units) of the int4 part,
  // written by it and read by the newest part, which merges its result into o.
  float* lse;
  int32_t num_qo_heads;
};

// A prefill block's place (both prefill kernels): its sequence, KV head and head tile from the
// grid, its first query row r0 (blocks launched longest-first), and the sequence's query range
// and KV length. A block with r0 >= q_len has nothing to do.
struct PrefillBlock {
  int seq, kv_head, head_tile, q_begin, q_len, r0, page_begin, kv_len, offset;
};

__device__ __forceinline__ PrefillBlock prefill_block(const PrefillKernelArgs& a) {
  PrefillBlock b;
  b.seq = blockIdx.z;
  b.kv_head = blockIdx.y / a.head_tiles;
  b.head_tile = blockIdx.y % a.head_tiles;
  b.q_begin = a.qo_indptr[b.seq];
  b.q_len = a.qo_indptr[b.seq + 1] - b.q_begin;
  b.r0 = (gridDim.x - 1 - blockIdx.x) * a.tokens_per_block;
  b.page_begin = a.kv_indptr[b.seq];
  const int num_pages = a.kv_indptr[b.seq + 1] - b.page_begin;
  b.kv_len = num_pages == 0 ? 0 : (num_pages - 1) * a.block_size + a.kv_last_page_len[b.seq];
  b.offset = b.kv_len - b.q_len;
  return b;
}

// kWarps warps per block, K/V tiles of kKvTile tokens (the kernel's kMinBlocks blocks per SM
// cap its registers). Past head dim 128 the Q fragments are read from shared memory for each
// product instead of held in registers (64 of them at 256, which O's 128 accumulators leave no
// room for).
template <int kHeadDim, int kWarps, int kKvTile>
struct PrefillShape {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kPitch = kHeadDim + 8;  // elements per shared-memory row
  static constexpr int kTileElems = kKvTile * kPitch;
  static constexpr int kStages = 2;
  static constexpr bool kQSmem = kHeadDim > 128;
  // kStages x (K, V) 16-bit tiles, then (kQSmem) each warp's 16 query rows.
  static constexpr size_t kTileBytes = 2 * kTileElems * sizeof(uint16_t);
  static constexpr size_t kQBytes = kQSmem ? 16u * kWarps * kPitch * sizeof(uint16_t) : 0u;
  static constexpr size_t kSmemBytes = kStages * kTileBytes + kQBytes;
};

// kQDType: q, o and the cache (bf16 or fp16). kWhole: every key of the row's causal (and window)
// range from the layout's block table, o written as it is; else INT4's newest part (its keys
// from the newest-blocks group's table, merged into o by the log-sum-exps).
template <DType kQDType, int kHeadDim, int kWarps, int kKvTile, int kMinBlocks, bool kWhole>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    prefill_attention_kernel(const __grid_constant__ PrefillKernelArgs a) {
  using Shape = PrefillShape<kHeadDim, kWarps, kKvTile>;
  using T = typename CudaType<kQDType>::type;  // q, o, the cache and the tensor-core inputs
  constexpr int kThreads = Shape::kThreads;
  constexpr int kPitch = Shape::kPitch;
  constexpr int kN = kKvTile;
  constexpr int kChunks = kHeadDim / 16;   // k-chunks of Q K^T, pairs of n-tiles of P V
  constexpr int kDimTiles = kHeadDim / 8;  // n-tiles of O
  constexpr int kTokTiles = kN / 8;        // n-tiles of S
  constexpr int kRowVecs = kHeadDim / 8;   // 16-byte vectors per K/V row
  static_assert(kN * kRowVecs % kThreads == 0, "whole vectors per thread");

  // offset: the position of query row 0.
  const auto [seq, kv_head, head_tile, q_begin, q_len, r0, page_begin, kv_len, offset] =
      prefill_block(a);
  if (r0 >= q_len) return;
  const int kv_hi = offset + min(q_len, r0 + a.tokens_per_block);  // exclusive
  int kv_lo = a.window_left >= 0 ? max(0, offset + r0 - a.window_left) : 0;
  // INT4's newest part: the newest blocks' keys of the block's first row on, by logical block.
  if constexpr (!kWhole) kv_lo = max(kv_lo, int4_keys(offset + r0, a.block_size, a.newest_blocks));
  const int32_t* pages = kWhole ? a.kv_indices + page_begin
                                : a.kv_indices + a.newest_indptr[seq] - a.newest_first_block[seq];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;  // fragment row (and column within an n-tile)
  const int t = lane & 3;
  const int warps_per_head = kWarps / a.heads_per_block;
  const int head = kv_head * a.group_size + head_tile * a.heads_per_block + warp / warps_per_head;
  const int w_r0 = r0 + (warp % warps_per_head) * 16;  // this warp's first query token
  const bool warp_active = w_r0 < q_len;
  const int row_a = w_r0 + g;  // this thread's two query rows
  const int row_b = row_a + 8;
  const int pos_a = offset + row_a;
  const int pos_b = offset + row_b;
  // The warp's attended keys: [w_lo, w_hi).
  const int w_hi = offset + min(q_len, w_r0 + 16);
  int w_lo = a.window_left >= 0 ? max(0, offset + w_r0 - a.window_left) : 0;
  // Each row's first key in the newest blocks (its int4 keys lie before it); 0 when whole.
  const int split_a = kWhole ? 0 : int4_keys(pos_a, a.block_size, a.newest_blocks);
  const int split_b = kWhole ? 0 : int4_keys(pos_b, a.block_size, a.newest_blocks);
  if constexpr (!kWhole) w_lo = max(w_lo, int4_keys(offset + w_r0, a.block_size, a.newest_blocks));

  extern __shared__ uint4 smem[];
  char* s_base = reinterpret_cast<char*>(smem);

  // Q fragments for all k-chunks (zeros for rows past q_len): in registers, or (kQSmem) the
  // warp's 16 rows in shared memory, [16][kPitch], read by ldmatrix for each product.
  constexpr bool kQSmem = Shape::kQSmem;
  uint32_t qf[kQSmem ? 1 : kChunks][4];
  const T* q_head = static_cast<const T*>(a.q) + head * kHeadDim;
  T* const q_s = reinterpret_cast<T*>(s_base + Shape::kStages * Shape::kTileBytes) +
                 warp * 16 * kPitch;
  if constexpr (kQSmem) {
    for (int i = lane; i < 16 * kRowVecs; i += 32) {
      const int r = i / kRowVecs;
      const int c = i % kRowVecs;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (w_r0 + r < q_len) {
        v = *reinterpret_cast<const uint4*>(q_head + (q_begin + w_r0 + r) * a.q_token_stride +
                                            c * 8);
      }
      *reinterpret_cast<uint4*>(q_s + r * kPitch + c * 8) = v;
    }
    __syncwarp();
  } else {
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
  }

  float o[kDimTiles][4];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  const T* k_head = static_cast<const T*>(a.k_data) + kv_head * a.head_stride;
  const T* v_head = static_cast<const T*>(a.v_data) + kv_head * a.head_stride;
  // The tiles the products read: [stage][K, V][kN][kPitch].
  auto k_buf = [&](int st) { return reinterpret_cast<T*>(s_base) + 2 * st * Shape::kTileElems; };
  auto v_buf = [&](int st) {
    return reinterpret_cast<T*>(s_base) + (2 * st + 1) * Shape::kTileElems;
  };

  // Copies tile j (tokens kv_lo + j * kN ..); tokens past kv_hi are zero-filled (not read).
  auto issue = [&](int j) {
    const int tile = kv_lo + j * kN;
    // K/V rows: 16-byte vectors of 16-bit values.
    constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));
    constexpr int kVecs = kHeadDim / kVecElems;
    constexpr int kRowBytes = kPitch * 2;
    static_assert(kN * kVecs % kThreads == 0, "whole vectors per thread");
    char* ks = reinterpret_cast<char*>(k_buf(j & 1));
    char* vs = reinterpret_cast<char*>(v_buf(j & 1));
    // Token tok's vector c (clamped to kv_lo past kv_hi: a valid address, not read).
    auto src = [&](int tok, int c) {
      const int tok_c = tok < kv_hi ? tok : kv_lo;
      return static_cast<int64_t>(pages[tok_c >> a.log2_block_size]) * a.block_stride +
             (tok_c & (a.block_size - 1)) * a.token_stride + c * kVecElems;
    };
#pragma unroll
    for (int i = 0; i < kN * kVecs / kThreads; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int r = idx / kVecs;
      const int c = idx % kVecs;
      cp_async16_zfill(vs + r * kRowBytes + c * 16, v_head + src(tile + r, c), tile + r < kv_hi);
      cp_async16_zfill(ks + r * kRowBytes + c * 16, k_head + src(tile + r, c), tile + r < kv_hi);
    }
  };

  const int num_tiles = (kv_hi - kv_lo + kN - 1) / kN;
  const int mi = lane >> 3;  // ldmatrix: lane l gives row (l & 7) of matrix (l >> 3)
  const int mr = lane & 7;
  issue(0);
  cp_async_commit();
  for (int j = 0; j < num_tiles; ++j) {
    if (j + 1 < num_tiles) issue(j + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int tile = kv_lo + j * kN;

    // Skip a tile that holds none of this warp's keys (past its causal diagonal or before its
    // window); the warp still takes part in the copies and barriers.
    const bool warp_needs = warp_active && tile < w_hi && tile + kN > w_lo;
    if (warp_needs) {
      const T* ks = k_buf(j & 1);
      const T* vs = v_buf(j & 1);
      float s[kTokTiles][4];
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        uint32_t qa[4];
        if constexpr (kQSmem) {
          // (rows 0..7, channels 16c..+7), (8..15, 16c..), (0..7, 16c+8..), (8..15, 16c+8..)
          // -> a0..a3.
          ldmatrix_x4(qa, q_s + ((mi & 1) * 8 + mr) * kPitch + 16 * c + (mi >> 1) * 8);
        } else {
          qa[0] = qf[c][0];
          qa[1] = qf[c][1];
          qa[2] = qf[c][2];
          qa[3] = qf[c][3];
        }
#pragma unroll
        for (int p = 0; p < kTokTiles / 2; ++p) {
          // (tokens 16p..+7, channels 16c..+7), (16p..+7, 16c+8..), (16p+8.., 16c..),
          // (16p+8.., 16c+8..) -> b0, b1 of n-tile 2p, then of 2p + 1.
          uint32_t b[4];
          ldmatrix_x4(b, ks + (16 * p + (mi >> 1) * 8 + mr) * kPitch + 16 * c + (mi & 1) * 8);
          mma_16816<kQDType>(s[2 * p], qa, b[0], b[1]);
          mma_16816<kQDType>(s[2 * p + 1], qa, b[2], b[3]);
        }
      }
      // Scale and mask (causal, window, tile end, and each row's own first newest-block key); new
      // row maxima.
      float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int tok = tile + 8 * n + 2 * t + (e & 1);
          const int pos = e < 2 ? pos_a : pos_b;
          const int split = e < 2 ? split_a : split_b;
          const bool ok = tok <= pos && tok < kv_hi && tok >= split &&
                          (a.window_left < 0 || tok >= pos - a.window_left);
          s[n][e] = ok ? s[n][e] * a.scale_log2 : -INFINITY;
        }
        mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
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
      const float base_a = new_a == -INFINITY ? 0.0f : new_a;
      const float base_b = new_b == -INFINITY ? 0.0f : new_b;
      m_a = new_a;
      m_b = new_b;
      if (alpha_a != 1.0f || alpha_b != 1.0f) {
        l_a *= alpha_a;
        l_b *= alpha_b;
#pragma unroll
        for (int jj = 0; jj < kDimTiles; ++jj) {
          o[jj][0] *= alpha_a;
          o[jj][1] *= alpha_a;
          o[jj][2] *= alpha_b;
          o[jj][3] *= alpha_b;
        }
      }
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) {
        s[n][0] = fast_exp2(s[n][0] - base_a);
        s[n][1] = fast_exp2(s[n][1] - base_a);
        s[n][2] = fast_exp2(s[n][2] - base_b);
        s[n][3] = fast_exp2(s[n][3] - base_b);
        l_a += s[n][0] + s[n][1];
        l_b += s[n][2] + s[n][3];
      }
      // O += P V: P's accumulator layout is the A-fragment layout of the next product.
#pragma unroll
      for (int kc = 0; kc < kN / 16; ++kc) {
        uint32_t pf[4];
        pf[0] = pack2<kQDType>(s[2 * kc][0], s[2 * kc][1]);
        pf[1] = pack2<kQDType>(s[2 * kc][2], s[2 * kc][3]);
        pf[2] = pack2<kQDType>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
        pf[3] = pack2<kQDType>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          // (tokens 16kc..+7, channels 16c..+7), (16kc+8.., 16c..), (16kc.., 16c+8..),
          // (16kc+8.., 16c+8..), transposed -> b0, b1 of n-tile 2c, then of 2c + 1.
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, vs + (16 * kc + (mi & 1) * 8 + mr) * kPitch + 16 * c + (mi >> 1) * 8);
          mma_16816<kQDType>(o[2 * c], pf, b[0], b[1]);
          mma_16816<kQDType>(o[2 * c + 1], pf, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copy overwrites this stage
  }
  cp_async_wait<0>();

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  if (!warp_active) return;
  float inv_a = l_a > 0.0f ? a.out_scale / l_a : 0.0f;
  float inv_b = l_b > 0.0f ? a.out_scale / l_b : 0.0f;
  T* o_head = static_cast<T*>(a.o) + head * kHeadDim;
  // The newest part weighs the int4 part's output (already in o, its log-sum-exps in lse)
  // against its own: o = w_i o_i + w_n o_n, weights 2^(lse - max) normalized.
  float prev_a = 0.0f, prev_b = 0.0f;  // the int4 part's weights (newest part)
  if constexpr (!kWhole) {
    const float lse_a = row_lse2(m_a, l_a);
    const float lse_b = row_lse2(m_b, l_b);
    const float* lse_a_at = a.lse + static_cast<int64_t>(q_begin + row_a) * a.num_qo_heads + head;
    const float* lse_b_at = a.lse + static_cast<int64_t>(q_begin + row_b) * a.num_qo_heads + head;
    auto weigh = [](float lse_int4, float lse_newest, float& inv, float& prev) {
      const float mx = fmaxf(lse_int4, lse_newest);  // lse_newest is finite: a row's own key
      const float w_int4 = lse_int4 == -INFINITY ? 0.0f : fast_exp2(lse_int4 - mx);
      const float w_newest = fast_exp2(lse_newest - mx);
      const float norm = 1.0f / (w_int4 + w_newest);
      inv *= w_newest * norm;
      prev = w_int4 * norm;
    };
    if (row_a < q_len) weigh(*lse_a_at, lse_a, inv_a, prev_a);
    if (row_b < q_len) weigh(*lse_b_at, lse_b, inv_b, prev_b);
  }
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) {
    const int col = 8 * j + 2 * t;
    if (row_a < q_len) {
      auto* out = reinterpret_cast<uint32_t*>(o_head + (q_begin + row_a) * a.o_token_stride + col);
      const float2 before = kWhole ? make_float2(0.0f, 0.0f) : unpack2<kQDType>(*out);
      *out =
          pack2<kQDType>(o[j][0] * inv_a + prev_a * before.x, o[j][1] * inv_a + prev_a * before.y);
    }
    if (row_b < q_len) {
      auto* out = reinterpret_cast<uint32_t*>(o_head + (q_begin + row_b) * a.o_token_stride + col);
      const float2 before = kWhole ? make_float2(0.0f, 0.0f) : unpack2<kQDType>(*out);
      *out =
          pack2<kQDType>(o[j][2] * inv_b + prev_b * before.x, o[j][3] * inv_b + prev_b * before.y);
    }
  }
}

// The arguments every prefill launch fills alike, for blocks of `rows` query rows: pointers,
// strides, scales, and the head packing (the largest power of two dividing the group, at most
// max_heads, heads of one KV group per block).
inline PrefillKernelArgs prefill_kernel_args(const PrefillAttentionParams& p, int32_t rows,
                                             int32_t max_heads) {
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
  a.group_size = p.num_qo_heads / c.num_kv_heads;
  int32_t heads = 1;
  while (heads * 2 <= max_heads && a.group_size % (heads * 2) == 0) heads *= 2;
  a.heads_per_block = heads;
  a.head_tiles = a.group_size / heads;
  a.tokens_per_block = rows / heads;
  a.block_size = c.block_size;
  int log2_bs = 0;
  while ((1 << (log2_bs + 1)) <= c.block_size) ++log2_bs;
  a.log2_block_size = log2_bs;
  a.window_left = p.window_left;
  set_kv_scale_args(a, c, p.sm_scale);
  a.num_qo_heads = p.num_qo_heads;
  return a;
}

// INT4's newest part: 4 warps (64 query rows) per block, 64-token K/V tiles, two blocks per
// SM (measured on an H200 GPU against 8 warps, one block per SM, as the whole-range 16-bit
// kernel: 200-217 TFLOP/s against 185-201; docs/kernels.md).
template <DType kQDType, int kHeadDim>
Status launch_prefill_newest(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr int kWarps = 4;
  using Shape = PrefillShape<kHeadDim, kWarps, 64>;
  auto* kernel = prefill_attention_kernel<kQDType, kHeadDim, kWarps, 64, 2, false>;
  // Once per instance: allow the dynamic shared memory beyond the default 48 KiB.
  static const cudaError_t configured = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Shape::kSmemBytes));
  STRATA_CUDA_CHECK(configured);
  const PagedKvCacheView& c = p.cache;
  PrefillKernelArgs a = prefill_kernel_args(p, 16 * kWarps, kWarps);
  a.newest_blocks = p.newest.blocks;
  a.newest_indptr = p.newest.layout.kv_indptr;
  a.newest_first_block = p.newest.layout.first_block;
  a.lse = p.lse_workspace;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.max_q_len, a.tokens_per_block)),
                  static_cast<unsigned>(c.num_kv_heads * a.head_tiles),
                  static_cast<unsigned>(p.layout.num_seqs));
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

// A 16-bit cache at a head dim the warp-specialized kernel has no room for (256): the whole key
// range through this kernel, 8 warps (128 query rows) per block, one block per SM, K/V tiles of
// kPrefillWholeKvTile keys, Q read from shared memory (PrefillShape::kQSmem: 202,752 bytes in
// all). O's 128 accumulators per thread leave ptxas 20 bytes to spill at 255 registers, the
// least of the shapes tried (docs/kernels.md, "Head dim 256").
inline constexpr int kPrefillWholeKvTile = 64;

template <DType kQDType, int kHeadDim>
Status launch_prefill_whole(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr int kWarps = 8;
  using Shape = PrefillShape<kHeadDim, kWarps, kPrefillWholeKvTile>;
  auto* kernel = prefill_attention_kernel<kQDType, kHeadDim, kWarps, kPrefillWholeKvTile, 1, true>;
  static const cudaError_t configured = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Shape::kSmemBytes));
  STRATA_CUDA_CHECK(configured);
  const PagedKvCacheView& c = p.cache;
  const PrefillKernelArgs a = prefill_kernel_args(p, 16 * kWarps, kWarps);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.max_q_len, a.tokens_per_block)),
                  static_cast<unsigned>(c.num_kv_heads * a.head_tiles),
                  static_cast<unsigned>(p.layout.num_seqs));
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

// The newest part is instantiated only in the 16-bit instance files and declared extern in
// the INT4 ones, so that each kernel is compiled into one translation unit (a template kernel
// compiled into two is two device functions, and the shared-memory attribute set on one need
// not be the one a launch uses).
#define STRATA_PREFILL_NEWEST_PART(prefix, kQ, kHeadDim) \
  prefix Status launch_prefill_newest<kQ, kHeadDim>(const PrefillAttentionParams&, cudaStream_t)

}  // namespace strata::cuda::detail

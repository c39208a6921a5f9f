#pragma once
// Warp-specialized paged prefill attention for 16-bit, FP8 and INT8 caches on Hopper: the
// FlashAttention-3 division of labour over the paged pool (docs/kernels.md, "Warp-specialized
// prefill"). Included only through prefill_attention_run.cuh.
//
// Quantized caches: the producer's bulk copies bring the codes (half BF16's bytes) into shared
// memory. FP8 (E4M3, E5M2) and INT8: S = Q K^T runs on the 8-bit tensor cores (FP8's, or the
// integer ones), K's codes landing straight in the ring it reads and Q rounded per (token, head)
// row to e4m3 or int8 codes under a scale per row, as the decode kernel rounds it
// (query_codes.cuh), so a token's attention does not depend on which kernel ran its row; the
// row's scale multiplies its scores, and INT8's per-key K scales (staged beside K's codes) its
// score columns. V's codes go to a staging ring and the producer's four warps convert each tile
// to fp16 in the swizzled layout P V reads: FP8's exactly (its per-layer scales are folded into
// the softmax scale and the output), INT8's to code x scale (one rounding). INT4's K and V are
// both staged and converted. P is fp16.
//
// A thread block owns 128 query rows (heads_per_block heads of one KV group times
// tokens_per_block tokens, as the mma.sync kernel packs them) and has three warpgroups:
//  - a producer (warpgroup 2, its registers given back to the other two) copies the block's
//    tiles of kN keys from the pool, whole KV blocks by bulk tensor copy and the tile's tail by
//    cp.async, whole key rows into wgmma's 128-byte swizzle,
//    K and V in separate rings of kStages stages, each stage handed over by mbarriers (landed:
//    the copies' arrivals; released: every consumer warp's);
//  - two consumers, 64 rows each, each computing S = Q K^T (wgmma, Q and K from shared memory),
//    the online softmax in registers, and O += P V (wgmma, P from registers in the accumulator
//    layout, V read as an MN-major B: no transposition). Software-pipelined: iteration j issues
//    S_j and P_{j-1} V_{j-1} together and runs tile j's softmax under the second product.
//    Under PrefillWsVariant::kPingPong and kPingPong3 the two take turns issuing (named
//    barriers), so that one's softmax runs under the other's products.
// Tiles run from the last (the causal diagonal, masked) down to the first, as FlashAttention-3
// orders them. Query row i of a sequence sits at position kv_len - q_len + i (causal), as in
// the mma.sync kernel, whose masking (causal, window, tile end) and log2-unit softmax this
// follows; the score scale is folded into the exponent (one FFMA per score).

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/query_codes.cuh"
#include "kernels/cuda/kv_codes.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/prefill_attention_kernel.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace strata::cuda::detail {

// kKv's codes (FP8, INT8, INT4) are staged (kStages tiles, one byte per channel, INT4 half a
// byte) and converted by the producer: INT4's K and V, FP8's and INT8's V only (their K codes
// land in the ring S = Q K^T reads, and Q is 8-bit codes with a scale per row). The statistics
// are staged beside the codes: INT8's per-token scales (kN fp16 values per stage; K's read by
// the consumers, V's by the conversion), INT4's K scales and zero points per block and channel
// and V's per token.
// kStageCount: K/V ring stages (prefill_ws_stages).
template <DType kKv, int kHeadDim, int kStageCount = 2>
struct PrefillWsShape {
  static constexpr bool kI4 = kKv == DType::kI4;
  static constexpr bool kCodes = is_quantized_kv(kKv) || kI4;
  static constexpr bool kFp8 = kKv == DType::kF8E4M3 || kKv == DType::kF8E5M2;
  static constexpr bool kI8 = kKv == DType::kI8;
  // Q as 8-bit codes and S = Q K^T on the 8-bit tensor cores over K's codes as copied.
  static constexpr bool kQCodes = kRoundsQuery<kKv>;
  static constexpr int kConsumers = 2;           // warpgroups of 64 query rows
  static constexpr int kRows = 64 * kConsumers;  // query rows per block
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kN = 128;  // keys per tile
  static constexpr int kStages = kStageCount;
  static constexpr int kRowVecs = kHeadDim / 8;  // 16-byte vectors per row
  // Q: 16-bit rows; FP8 and INT8: 8-bit codes, then the rows' float scales, rounded up to the
  // 1024 bytes the K ring's swizzle atoms need.
  static constexpr int kQBytes =
      kQCodes ? (kRows * kHeadDim + kRows * 4 + 1023) / 1024 * 1024 : kRows * kHeadDim * 2;
  static constexpr int kTileBytes = kN * kHeadDim * 2;  // one 16-bit K or V tile
  static constexpr int kKTileBytes = kQCodes ? kN * kHeadDim : kTileBytes;  // what S reads
  static constexpr int kCodeRowBytes = kI4 ? kHeadDim / 2 : kHeadDim;
  static constexpr int kCodeTileBytes = kCodes ? kN * kCodeRowBytes : 0;
  // Statistics per stage, K's then V's: INT8 a scale per key; INT4 K's scales then zero points
  // of each block a tile holds ([block][scales, zeros][kHeadDim], blocks of at least 8 keys), V's
  // scales then zero points per key ([scales, zeros][kN]).
  static constexpr int kKStatBytes = kI8 ? kN * 2 : kI4 ? (kN / 8) * 2 * kHeadDim * 2 : 0;
  static constexpr int kVStatBytes = kI8 ? kN * 2 : kI4 ? 2 * kN * 2 : 0;
  static constexpr int kCodeSlots = kCodes ? (kQCodes ? 1 : 2) : 0;  // staged: V, or K and V
  // K and V, full and empty, per stage; full and empty per code stage.
  static constexpr int kBarriers = (4 + 2 * kCodeSlots) * kStages;
  static constexpr size_t kSmemBytes =
      1024u + static_cast<size_t>(kQBytes) + kStages * (kKTileBytes + kTileBytes) +
      static_cast<size_t>(kStages) *
          (kCodeSlots * kCodeTileBytes + kKStatBytes + kVStatBytes) +
      8u * kBarriers;
  static_assert(kSmemBytes <= 227u * 1024u, "more shared memory than a block may have");
  // Registers: the producer keeps kProducerRegs, each consumer thread gets kConsumerRegs
  // (128 x 40 + 256 x 232 = 168 x 384, the block's allocation; the consumers spill about ten,
  // outside the tile loop's products). The converting producer needs a code vector and its fp16
  // values live.
  static constexpr uint32_t kProducerRegs = kCodes ? 40 : 24;
  static constexpr uint32_t kConsumerRegs = kCodes ? 232 : 240;
};

// K/V ring stages: three for 16-bit caches under kPingPong3 and kIndependent3 (230,496 bytes of
// shared memory at head dim 128 with Q), so that a stage's copy has one more tile's time to
// land; two otherwise (the quantized caches' code stages leave no room for a third).
constexpr int prefill_ws_stages(DType kv, PrefillWsVariant v) {
  const bool three = v == PrefillWsVariant::kPingPong3 || v == PrefillWsVariant::kIndependent3;
  return three && (kv == DType::kBF16 || kv == DType::kF16) ? 3 : 2;
}

// The kernel's arguments: the shared prefill arguments and the bulk tensor copy's view of this
// layer's K and V pools, [block][KV head][token][channel] with boxes of 64 channels x one
// block's tokens, written in the 128-byte swizzle (FP8 and INT8: of all channels x one block's
// tokens, unswizzled, into the staging ring).
struct PrefillWsArgs {
  CUtensorMap k_map;
  CUtensorMap v_map;
  PrefillKernelArgs a;
};

// A block's place in the order of every schedule but kBase, longest first over the whole grid:
// the linear block index (x fastest, the order in which blocks start) is read as (KV head and
// head tile, sequence, query tile) with the query tile slowest, and query tile k is the k-th
// from its sequence's end: the tiles nearest the ends attend the most keys. The blocks are
// prefill_block's (the same r0 per sequence) in another order, so every output is the same. A
// block past its sequence's tiles gets r0 = q_len (nothing to do).
__device__ __forceinline__ PrefillBlock prefill_block_longest_first(const PrefillKernelArgs& a) {
  const uint64_t heads = gridDim.y;
  const uint64_t pairs = heads * gridDim.z;  // (head tile, sequence) pairs
  const uint64_t linear =
      blockIdx.x + static_cast<uint64_t>(gridDim.x) * (blockIdx.y + heads * blockIdx.z);
  const auto k = static_cast<int>(linear / pairs);
  const auto pair = static_cast<int>(linear % pairs);
  PrefillBlock b;
  b.seq = pair / static_cast<int>(heads);
  b.kv_head = pair % static_cast<int>(heads) / a.head_tiles;
  b.head_tile = pair % static_cast<int>(heads) % a.head_tiles;
  b.q_begin = a.qo_indptr[b.seq];
  b.q_len = a.qo_indptr[b.seq + 1] - b.q_begin;
  const int tiles = (b.q_len + a.tokens_per_block - 1) / a.tokens_per_block;
  b.r0 = k < tiles ? (tiles - 1 - k) * a.tokens_per_block : b.q_len;
  b.page_begin = a.kv_indptr[b.seq];
  const int num_pages = a.kv_indptr[b.seq + 1] - b.page_begin;
  b.kv_len = num_pages == 0 ? 0 : (num_pages - 1) * a.block_size + a.kv_last_page_len[b.seq];
  b.offset = b.kv_len - b.q_len;
  return b;
}

// kQ: the queries' and output's dtype; kKv: the cache's (kQ itself, or FP8 / INT8 / INT4 with
// kQ = BF16); kVariant: the schedule (PrefillWsVariant). An INT4 launch covers each query row's
// int4 keys (int4_keys, kv_codes.cuh) and leaves the rows' log-sum-exps in a.lse for the newest
// part's launch, which merges.
template <DType kQ, DType kKv, int kHeadDim, PrefillWsVariant kVariant>
__global__ void __launch_bounds__(PrefillWsShape<kKv, kHeadDim>::kThreads, 1)
    prefill_ws_kernel(const __grid_constant__ PrefillWsArgs args) {
  const PrefillKernelArgs& a = args.a;
  using Shape = PrefillWsShape<kKv, kHeadDim, prefill_ws_stages(kKv, kVariant)>;
  constexpr bool kCodes = Shape::kCodes;
  constexpr bool kI4 = Shape::kI4;
  constexpr bool kI8 = Shape::kI8;
  constexpr bool kQCodes = Shape::kQCodes;
  static_assert(kCodes || kKv == kQ);
  // The products' dtype: the cache's, or fp16 for codes (FP8's V codes exact there); FP8's and
  // INT8's S = Q K^T runs on the 8-bit tensor cores.
  constexpr DType kT = kCodes ? DType::kF16 : kKv;
  using T = typename CudaType<kT>::type;
  using TQ = typename CudaType<kQ>::type;
  constexpr int kN = Shape::kN;
  constexpr int kStages = Shape::kStages;
  constexpr int kRowVecs = Shape::kRowVecs;
  constexpr int kTileBytes = Shape::kTileBytes;
  constexpr int kTokTiles = kN / 8;        // n-tiles of S
  constexpr int kDimTiles = kHeadDim / 8;  // n-tiles of O
  // Shared tiles in wgmma's 128-byte swizzle: a row (query or key) is kHeadDim / 64 atom
  // columns of 128 bytes (64 channels) each, [column][row][128 B], its 16-byte chunk c at slot
  // (c % 8) ^ (row % 8) of its 128 bytes. Whole-row copies then hit distinct banks, and the
  // products read 8-row atoms of 1024 bytes.
  constexpr int kQColBytes = 64 * 128;   // one atom column of a consumer's 64 Q rows
  constexpr int kKvColBytes = kN * 128;  // one atom column of a K or V tile
  auto swz = [](int row, int c, int col_bytes) {
    return (c / 8) * col_bytes + row * 128 + (((c % 8) ^ (row % 8)) << 4);
  };

  // offset: the position of query row 0.
  // Every schedule but kBase: longest-first blocks, edge-tile masks, opaque descriptors, lane-
  // parallel copies; kTurns: the consumers' turns (ping-pong).
  constexpr bool kRefined = kVariant != PrefillWsVariant::kBase;
  constexpr bool kTurns = kVariant == PrefillWsVariant::kPingPong ||
                          kVariant == PrefillWsVariant::kPingPong3 ||
                          kVariant == PrefillWsVariant::kPingPongSerial;
  // kOverlap: tile j's softmax runs under the consumer's own P_{j-1} V_{j-1} (pipelined).
  constexpr bool kOverlap = kVariant != PrefillWsVariant::kPingPongSerial;
  const auto [seq, kv_head, head_tile, q_begin, q_len, r0, page_begin, kv_len, offset] =
      kRefined ? prefill_block_longest_first(a) : prefill_block(a);
  if (r0 >= q_len) return;
  const int tpb = a.tokens_per_block;
  // Exclusive; INT4: the int4 keys of the block's last row (whole blocks), none for a block
  // whose rows all read only the newest blocks.
  const int last_pos = offset + min(q_len, r0 + tpb) - 1;
  const int kv_hi = kI4 ? int4_keys(last_pos, a.block_size, a.newest_blocks) : last_pos + 1;
  // Tiles start on block boundaries (the bulk copies move whole blocks); keys before the first
  // row's window are masked.
  const int kv_lo =
      a.window_left >= 0 ? max(0, offset + r0 - a.window_left) & ~(a.block_size - 1) : 0;
  const int num_tiles = max(0, (kv_hi - kv_lo + kN - 1) / kN);
  const int32_t* pages = a.kv_indices + page_begin;

  extern __shared__ uint4 smem[];
  // The swizzle's atoms need 1024-byte alignment (kSmemBytes has room for it).
  char* const q_smem = reinterpret_cast<char*>(smem) + ((1024 - smem_addr(smem) % 1024) % 1024);
  // [stage][column][kN keys][128 B]; FP8 and INT8: [stage][kN keys][kHeadDim codes] in the 128-
  // or 64-byte swizzle (wgmma.cuh), 8-key atoms of 8 kHeadDim bytes.
  char* const k_smem = q_smem + Shape::kQBytes;
  char* const v_smem = k_smem + kStages * Shape::kKTileBytes;
  // Per stage: K landed, V landed (the producer's copies), K released, V released (a consumer
  // warp each). K and V are separate pipelines: a consumer releases tile j's K after S_j and
  // its V after P_j V_j, one iteration later.
  // Codes: the code stages, [slot][stage][kN keys][kCodeRowBytes], slots K then V (FP8 and INT8:
  // V's only).
  char* const codes_smem = v_smem + kStages * kTileBytes;
  // INT8 and INT4: the staged statistics, K's stages then V's (Shape::kKStatBytes). INT8's K
  // scales of stage st arrive and are released with K's stage st.
  char* const stats_smem = codes_smem + Shape::kCodeSlots * kStages * Shape::kCodeTileBytes;
  auto stats_stage = [&](int kv, int st) {
    return reinterpret_cast<uint16_t*>(
        stats_smem + (kv == 0 ? st * Shape::kKStatBytes
                              : kStages * Shape::kKStatBytes + st * Shape::kVStatBytes));
  };
  uint64_t* const full_k = reinterpret_cast<uint64_t*>(
      stats_smem + kStages * (Shape::kKStatBytes + Shape::kVStatBytes));
  uint64_t* const full_v = full_k + kStages;
  uint64_t* const empty_k = full_v + kStages;
  uint64_t* const empty_v = empty_k + kStages;
  // Codes: a code stage landed (the bulk copies' bytes) and was converted (every producer thread).
  uint64_t* const code_full = empty_v + kStages;                          // [slot][stage]
  uint64_t* const code_empty = code_full + Shape::kCodeSlots * kStages;  // [slot][stage]

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      // 16-bit: the producer warp's lanes' cp.async arrivals and lane 0's byte count of the bulk
      // copies. Codes: every converting thread.
      // FP8's and INT8's K: lane 0's byte count alone.
      mbarrier_init(full_k + st, kQCodes ? 1 : kCodes ? 128 : 33);
      mbarrier_init(full_v + st, kCodes ? 128 : 33);
      // Every consumer warp; INT8: every consumer thread (each reads K's scales itself).
      mbarrier_init(empty_k + st, (kI8 ? 128 : 4) * Shape::kConsumers);
      mbarrier_init(empty_v + st, 4 * Shape::kConsumers);
      if constexpr (kCodes) {
        for (int slot = 0; slot < Shape::kCodeSlots; ++slot) {
          mbarrier_init(code_full + slot * kStages + st, 1);   // lane 0's byte count
          mbarrier_init(code_empty + slot * kStages + st, 128);  // every producer thread
        }
      }
    }
  }
  __syncthreads();

  if constexpr (kCodes) {
    if (wg == Shape::kConsumers) {
      // FP8 / INT8 / INT4 producer. Lane 0 of its first warp copies every block of a tile that
      // holds a key below kv_hi, whole (its rows past kv_hi are stale), into the code stage with
      // the block's statistics beside it (INT8: its per-token scales, one bulk copy of
      // block_size fp16 values; INT4: K's scales and zero points per channel, V's per token);
      // then all four warps convert the stage into the fp16 tile, writing zeros for the keys at
      // or past kv_hi (0 x NaN would be NaN in P V). FP8's codes become their exact fp16 values
      // (its per-layer scales are folded into the softmax scale and the output); INT8's become
      // code x scale and INT4's code x s + z in fp16, one rounding. FP8's and INT8's K codes
      // (and INT8's K scales) are copied straight into the ring S reads (their stale rows give
      // scores the softmax masks) and never converted.
      warpgroup_release_registers<Shape::kProducerRegs>();
      if (num_tiles == 0) return;
      const int pt = threadIdx.x - 128 * Shape::kConsumers;
      const int bs = a.block_size;
      constexpr int kRowBytes = Shape::kCodeRowBytes;
      // The code stage of K (kv = 0) or V (kv = 1): FP8 and INT8 stage V only.
      auto code_slot = [](int kv, int st) { return (kQCodes ? 0 : kv) * kStages + st; };
      auto copy = [&](int j, int kv) {
        const int st = j % kStages;
        const bool direct = kQCodes && kv == 0;
        mbarrier_wait(direct ? empty_k + st : code_empty + code_slot(kv, st),
                      ((j / kStages) & 1) ^ 1);
        uint64_t* const landed = direct ? full_k + st : code_full + code_slot(kv, st);
        const int tile = kv_lo + (num_tiles - 1 - j) * kN;
        const int blocks = min((kv_hi - tile + bs - 1) / bs, kN / bs);
        // Per block: its codes, then INT8's bs scales, INT4 K's 2 kHeadDim or V's 2 bs values.
        const int stat_values = kI8 ? bs : !kI4 ? 0 : kv == 0 ? 2 * kHeadDim : 2 * bs;
        mbarrier_arrive_expect_tx(
            landed, static_cast<uint32_t>(blocks * (bs * kRowBytes + 2 * stat_values)));
        char* const dst = direct ? k_smem + st * Shape::kKTileBytes
                                 : codes_smem + code_slot(kv, st) * Shape::kCodeTileBytes;
        const CUtensorMap* map = kv == 0 ? &args.k_map : &args.v_map;
        uint16_t* const stats = stats_stage(kv, st);
        for (int b = 0; b < blocks; ++b) {
          const int page = __ldg(pages + (tile >> a.log2_block_size) + b);
          tma_load_4d(dst + b * bs * kRowBytes, map, 0, 0, kv_head, page, landed);
          // Statistics are contiguous fp16 runs, 16-byte aligned (block_size >= 8; kv_layout.h):
          // a block's per-token values of one head, or INT4 K's per-channel ones.
          const int64_t block_at = static_cast<int64_t>(page) * a.scale_block_stride;
          if constexpr (kI8) {
            const uint16_t* src =
                (kv == 0 ? a.k_scales : a.v_scales) + block_at + kv_head * a.scale_head_stride;
            bulk_load(stats + b * bs, src, static_cast<uint32_t>(bs * 2), landed);
          } else if constexpr (kI4) {
            if (kv == 0) {
              const int64_t at = block_at + kv_head * a.k_stat_head_stride;
              bulk_load(stats + b * 2 * kHeadDim, a.k_scales + at, kHeadDim * 2, landed);
              bulk_load(stats + b * 2 * kHeadDim + kHeadDim, a.k_zeros + at, kHeadDim * 2, landed);
            } else {
              const int64_t at = block_at + kv_head * a.scale_head_stride;
              const auto bytes = static_cast<uint32_t>(bs * 2);
              bulk_load(stats + b * bs, a.v_scales + at, bytes, landed);
              bulk_load(stats + kN + b * bs, a.v_zeros + at, bytes, landed);
            }
          }
        }
      };
      // INT4: key r's 16 codes from channel 16 v (8 bytes) as fp16 code x s + z, channels
      // 0..7 in lo and 8..15 in hi. K's statistics are its block's, per channel; V's its own.
      auto int4_vec = [&](const char* codes, const uint16_t* stats, int kv, int r, int v,
                          uint4& lo, uint4& hi) {
        uint32_t w[4];
        load_int4_row<8>(reinterpret_cast<const uint8_t*>(codes) + r * kRowBytes + v * 8, w);
        uint4 out[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint4 sc, zp;
          if (kv == 0) {
            const uint16_t* k_stat = stats + (r >> a.log2_block_size) * 2 * kHeadDim + 16 * v + 8 * h;
            sc = *reinterpret_cast<const uint4*>(k_stat);
            zp = *reinterpret_cast<const uint4*>(k_stat + kHeadDim);
          } else {
            const uint32_t s2 = stats[r] * 0x10001u, z2 = stats[kN + r] * 0x10001u;
            sc = make_uint4(s2, s2, s2, s2);
            zp = make_uint4(z2, z2, z2, z2);
          }
          uint32_t c0, c1, c2, c3;
          u4codes4_to_f16x2(w[2 * h], c0, c1);
          u4codes4_to_f16x2(w[2 * h + 1], c2, c3);
          out[h] = make_uint4(hfma2_bits(c0, sc.x, zp.x), hfma2_bits(c1, sc.y, zp.y),
                              hfma2_bits(c2, sc.z, zp.z), hfma2_bits(c3, sc.w, zp.w));
        }
        lo = out[0];
        hi = out[1];
      };
      auto convert = [&](int j, int kv) {
        const int st = j % kStages;
        mbarrier_wait((kv == 0 ? empty_k : empty_v) + st, ((j / kStages) & 1) ^ 1);
        mbarrier_wait(code_full + code_slot(kv, st), (j / kStages) & 1);
        const int tile = kv_lo + (num_tiles - 1 - j) * kN;
        const char* const src = codes_smem + code_slot(kv, st) * Shape::kCodeTileBytes;
        const uint16_t* const stats = stats_stage(kv, st);
        char* const dst = (kv == 0 ? k_smem : v_smem) + st * kTileBytes;
        constexpr int kVecs = kHeadDim / 16;  // 16-code vectors per key
#pragma unroll 4
        for (int i = 0; i < kN * kVecs / 128; ++i) {
          const int idx = pt + i * 128;
          const int r = idx / kVecs;
          const int v = idx % kVecs;
          uint4 lo = make_uint4(0u, 0u, 0u, 0u), hi = lo;
          if (tile + r < kv_hi) {
            if constexpr (kI4) {
              int4_vec(src, stats, kv, r, v, lo, hi);
            } else {
              const uint4 c = *reinterpret_cast<const uint4*>(src + r * kRowBytes + v * 16);
              codes4_to_f16x2<kKv>(c.x, lo.x, lo.y);
              codes4_to_f16x2<kKv>(c.y, lo.z, lo.w);
              codes4_to_f16x2<kKv>(c.z, hi.x, hi.y);
              codes4_to_f16x2<kKv>(c.w, hi.z, hi.w);
              if constexpr (kI8) {
                const uint32_t sc = stats[r] * 0x10001u;  // the token's scale, both halves
                lo = make_uint4(hfma2_bits(lo.x, sc, 0u), hfma2_bits(lo.y, sc, 0u),
                                hfma2_bits(lo.z, sc, 0u), hfma2_bits(lo.w, sc, 0u));
                hi = make_uint4(hfma2_bits(hi.x, sc, 0u), hfma2_bits(hi.y, sc, 0u),
                                hfma2_bits(hi.z, sc, 0u), hfma2_bits(hi.w, sc, 0u));
              }
            }
          }
          *reinterpret_cast<uint4*>(dst + swz(r, 2 * v, kKvColBytes)) = lo;
          *reinterpret_cast<uint4*>(dst + swz(r, 2 * v + 1, kKvColBytes)) = hi;
        }
        fence_proxy_async();  // the products read the tile through the async proxy
        mbarrier_arrive((kv == 0 ? full_k : full_v) + st);
        // Each thread releases the code stage once its own reads are done (the next bulk copy
        // into it is ordered after every reader's arrival, not through a warp's lane 0).
        mbarrier_arrive(code_empty + code_slot(kv, st));
      };
      if constexpr (kQCodes) {
        // Lane 0 copies tile j + 2's K and V codes once V_j is converted: K_{j+2} takes K_j's
        // stage, free once the consumers have S_j, before they need V_{j+1}.
        auto copy_tile = [&](int j) {
          copy(j, 0);
          copy(j, 1);
        };
        if (pt == 0) {
          copy_tile(0);
          if (num_tiles > 1) copy_tile(1);
        }
        for (int j = 0; j < num_tiles; ++j) {
          convert(j, 1);
          if (pt == 0 && j + 2 < num_tiles) copy_tile(j + 2);
        }
        return;
      }
      // INT4: in the consumers' order, K_0, then K_{j+1} before V_j; item i + 1 copied before
      // item i is converted.
      auto item = [&](int i, int& j, int& kv) {
        if (i == 0) {
          j = 0;
          kv = 0;
        } else if (i == 2 * num_tiles - 1) {
          j = num_tiles - 1;
          kv = 1;
        } else {
          j = (i + 1) / 2 - (i % 2 == 0 ? 1 : 0);
          kv = i % 2 == 0 ? 1 : 0;
        }
      };
      const int items = 2 * num_tiles;
      if (pt == 0) copy(0, 0);
      for (int i = 0; i < items; ++i) {
        int j, kv;
        if (pt == 0 && i + 1 < items) {
          item(i + 1, j, kv);
          copy(j, kv);
        }
        item(i, j, kv);
        convert(j, kv);
      }
      return;
    }
  } else {
    if (wg == Shape::kConsumers) {
      // Producer: its first warp copies; the other three only give their registers back. Blocks
      // wholly below kv_hi go by the bulk tensor copy (lane 0 under kBase, else lane b for block
      // b; one copy per 64 channels of a block, landing in the swizzle the products read); the
      // tile's tail (a partial last block, and zeros past the sequence) by cp.async with zero
      // fill, whole rows by consecutive lanes.
      warpgroup_release_registers<Shape::kProducerRegs>();
      const int lane_p = threadIdx.x - 128 * Shape::kConsumers;
      if (lane_p >= 32) return;
      const T* k_head = static_cast<const T*>(a.k_data) + kv_head * a.head_stride;
      const T* v_head = static_cast<const T*>(a.v_data) + kv_head * a.head_stride;
      const int bs = a.block_size;
      // Tile j's K (kv = 0) or V (kv = 1) into its stage, once the consumers released the stage.
      auto load = [&](int j, int kv) {
        const int st = j % kStages;
        mbarrier_wait((kv == 0 ? empty_k : empty_v) + st, ((j / kStages) & 1) ^ 1);
        uint64_t* const landed = (kv == 0 ? full_k : full_v) + st;
        const int tile = kv_lo + (num_tiles - 1 - j) * kN;  // the last tile first
        char* const dst = (kv == 0 ? k_smem : v_smem) + st * kTileBytes;
        const int whole = min(max(kv_hi - tile, 0) / bs, kN / bs);  // blocks wholly below kv_hi
        if constexpr (kRefined) {
          // Lane b copies block b (at most kN / 8 = 16 blocks): the tile's block-table reads are
          // one round trip, not one per block. The expected bytes are counted first.
          if (lane_p == 0) {
            mbarrier_arrive_expect_tx(landed, static_cast<uint32_t>(whole * bs * kHeadDim * 2));
          }
          __syncwarp();
          if (lane_p < whole) {
            const CUtensorMap* map = kv == 0 ? &args.k_map : &args.v_map;
            const int page = __ldg(pages + (tile >> a.log2_block_size) + lane_p);
#pragma unroll
            for (int c = 0; c < kHeadDim / 64; ++c) {
              tma_load_4d(dst + c * kKvColBytes + lane_p * bs * 128, map, 64 * c, 0, kv_head, page,
                          landed);
            }
          }
        } else if (lane_p == 0) {
          const CUtensorMap* map = kv == 0 ? &args.k_map : &args.v_map;
          mbarrier_arrive_expect_tx(landed, static_cast<uint32_t>(whole * bs * kHeadDim * 2));
          for (int b = 0; b < whole; ++b) {
            const int page = __ldg(pages + (tile >> a.log2_block_size) + b);
#pragma unroll
            for (int c = 0; c < kHeadDim / 64; ++c) {
              tma_load_4d(dst + c * kKvColBytes + b * bs * 128, map, 64 * c, 0, kv_head, page,
                          landed);
            }
          }
        }
        const T* const head_ptr = kv == 0 ? k_head : v_head;
        for (int idx = whole * bs * kRowVecs + lane_p; idx < kN * kRowVecs; idx += 32) {
          const int c = idx % kRowVecs;
          const int r = idx / kRowVecs;
          const int tok = tile + r;
          const int tok_c = tok < kv_hi ? tok : kv_lo;  // a valid address, zero-filled
          const int64_t src =
              static_cast<int64_t>(__ldg(pages + (tok_c >> a.log2_block_size))) * a.block_stride +
              (tok_c & (bs - 1)) * a.token_stride + c * 8;
          cp_async16_zfill(dst + swz(r, c, kKvColBytes), head_ptr + src, tok < kv_hi);
        }
        mbarrier_arrive_cp_async(landed);
      };
      // In the order the consumers use them: K_0, then K_{j+1} before V_j (S_{j+1} and P_j V_j
      // are issued together).
      load(0, 0);
      for (int j = 0; j < num_tiles; ++j) {
        if (j + 1 < num_tiles) load(j + 1, 0);
        load(j, 1);
      }
      cp_async_wait_all();
      return;
    }
  }

  // Consumer wg: rows 64 wg .. 64 wg + 63 of the block. Block row R is query head R / tpb of the
  // block's heads, token r0 + R % tpb.
  warpgroup_claim_registers<Shape::kConsumerRegs>();
  const int wt = threadIdx.x % 128;
  const int warp = wt / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int head_base = kv_head * a.group_size + head_tile * a.heads_per_block;
  char* const q_wg = q_smem + wg * 64 * kHeadDim * 2;
  // This warp's 16 rows (one head: tpb >= 16) and this thread's two of them.
  const int w_row = 64 * wg + 16 * warp;
  const int head = head_base + w_row / tpb;
  const int w_r0 = r0 + w_row % tpb;  // the warp's first query token
  const bool warp_active = w_r0 < q_len;
  const int row_a = w_r0 + g;
  const int row_b = row_a + 8;
  // FP8 and INT8: Q as e4m3 or int8 codes for S on the 8-bit tensor cores, [row][kHeadDim codes]
  // in the 128- or 64-byte swizzle (wgmma.cuh), each row rounded under its scale
  // (query_codes.cuh) as the decode kernel rounds it; the rows' scales follow the codes and
  // multiply their scores in the softmax.
  float* const q_scales = reinterpret_cast<float*>(q_smem + Shape::kRows * kHeadDim);
  char* const q_codes = q_smem + wg * 64 * kHeadDim;
  // Quantized caches: two threads per Q row, half its channels each: row qr of this consumer,
  // block row q_row, and vector i of its half (zeros past the sequence).
  constexpr int kHalfVecs = kRowVecs / 2;
  const int qr = wt / 2;
  const int half = wt % 2;
  const int q_row = 64 * wg + qr;
  auto q_half_vec = [&](int i) {
    const int tok = r0 + q_row % tpb;
    const bool valid = tok < q_len;
    const TQ* q = static_cast<const TQ*>(a.q) +
                  static_cast<int64_t>(q_begin + (valid ? tok : 0)) * a.q_token_stride +
                  (head_base + q_row / tpb) * kHeadDim + half * (kHeadDim / 2);
    return valid ? *reinterpret_cast<const uint4*>(q + 8 * i) : make_uint4(0u, 0u, 0u, 0u);
  };
  if constexpr (kQCodes) {
    uint4 x[kHalfVecs];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kHalfVecs; ++i) {
      x[i] = q_half_vec(i);
      amax = fmaxf(amax, fmaxf(fmaxf(abs_max2<kQ>(x[i].x), abs_max2<kQ>(x[i].y)),
                               fmaxf(abs_max2<kQ>(x[i].z), abs_max2<kQ>(x[i].w))));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    const QueryScale qs = query_scale_of<kKv>(amax);
    // 8 codes (bytes 8 i .. 8 i + 7 of this half) into their 16-byte chunk's slot.
    const int swizzle = kHeadDim == 128 ? qr % 8 : (qr / 2) % 4;
#pragma unroll
    for (int i = 0; i < kHalfVecs; ++i) {
      const int byte = half * (kHeadDim / 2) + 8 * i;
      *reinterpret_cast<uint2*>(q_codes + qr * kHeadDim + (((byte / 16) ^ swizzle) << 4) +
                                byte % 16) =
          make_uint2(query_codes4<kKv, kQ>(x[i].x, x[i].y, qs.inv),
                     query_codes4<kKv, kQ>(x[i].z, x[i].w, qs.inv));
    }
    // A row of zeros (scale 0) has zero scores whatever multiplies them.
    if (half == 0) q_scales[q_row] = qs.scale > 0.0f ? qs.scale : 1.0f;
    fence_proxy_async();  // read by wgmma
    named_barrier_sync(1 + wg, 128);
  } else if constexpr (kCodes) {
    // INT4: converted to fp16 (saturating) as the decode kernel converts them, stored in the
    // swizzle.
#pragma unroll
    for (int i = 0; i < kHalfVecs; ++i) {
      const uint4 x = q_half_vec(i);
      const uint4 r = make_uint4(to_f16x2<kQ>(x.x), to_f16x2<kQ>(x.y), to_f16x2<kQ>(x.z),
                                 to_f16x2<kQ>(x.w));
      *reinterpret_cast<uint4*>(q_wg + swz(qr, half * kHalfVecs + i, kQColBytes)) = r;
    }
    fence_proxy_async();  // read by wgmma
    named_barrier_sync(1 + wg, 128);
  } else {
    const T* q = static_cast<const T*>(a.q);
#pragma unroll
    for (int i = 0; i < 64 * kRowVecs / 128; ++i) {
      const int idx = wt + i * 128;
      const int c = idx % kRowVecs;
      const int rr = idx / kRowVecs;
      const int row = 64 * wg + rr;
      const int tok = r0 + row % tpb;
      const bool valid = tok < q_len;
      const int64_t src = static_cast<int64_t>(q_begin + (valid ? tok : 0)) * a.q_token_stride +
                          (head_base + row / tpb) * kHeadDim + c * 8;
      cp_async16_zfill(q_wg + swz(rr, c, kQColBytes), q + src, valid);
    }
    cp_async_wait_all();
    fence_proxy_async();  // read by wgmma
    named_barrier_sync(1 + wg, 128);
  }
  const int pos_a = offset + row_a;
  const int pos_b = offset + row_b;
  // INT4: the warp's attended keys end at its last row's int4 keys, and each row's at its own.
  const int w_last = offset + min(q_len, w_r0 + 16) - 1;
  const int w_hi = kI4 ? int4_keys(w_last, a.block_size, a.newest_blocks) : w_last + 1;
  const int split_a = kI4 ? int4_keys(pos_a, a.block_size, a.newest_blocks) : pos_a + 1;
  const int split_b = kI4 ? int4_keys(pos_b, a.block_size, a.newest_blocks) : pos_b + 1;
  // Keys below this one are attended by every row of the warp (INT4: its first row's int4 keys).
  const int w_all =
      kI4 ? int4_keys(offset + w_r0, a.block_size, a.newest_blocks) : offset + w_r0 + 1;
  const int w_lo = a.window_left >= 0 ? max(0, offset + w_r0 - a.window_left) : 0;

  float o[kDimTiles][4];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  float alpha_a = 1.0f, alpha_b = 1.0f;  // the last softmax's rescale of O, applied before P V
  // The scores' scale to log2 units, per row (FP8 and INT8: times the row's Q scale).
  const float scale_a = kQCodes ? a.scale_log2 * q_scales[w_row + g] : a.scale_log2;
  const float scale_b = kQCodes ? a.scale_log2 * q_scales[w_row + g + 8] : a.scale_log2;
  float s[kTokTiles][4];
  // INT8: S in int32 from the integer tensor cores, started at kIntBias's bits so that each sum
  // reads as the float kIntBias + sum (|sum| <= kHeadDim x 127 x 127 < 2^22: exact).
  constexpr float kIntBias = 12582912.0f;  // 1.5 x 2^23
  int32_t si[kI8 ? kTokTiles : 1][4];
  uint32_t pf[kN / 16][4];

  // Descriptors of this consumer's Q and of stage 0's tiles (the start address is their low
  // field, in 16-byte units: a stage or a k-step is an addition). Q and K are K-major, 8-row
  // atoms 1024 bytes apart (FP8's K: atoms of 8 rows of kHeadDim bytes). V is read as an
  // MN-major B: 64-channel atom columns kKvColBytes apart along N, 8-key atoms 1024 bytes apart
  // along K.
  auto fp8_desc = [](const char* tile) {
    return kHeadDim == 128 ? wgmma_desc_sw128(tile, 16, 8 * kHeadDim)
                           : wgmma_desc_sw64(tile, 16, 8 * kHeadDim);
  };
  const uint64_t q_desc0 = kQCodes ? fp8_desc(q_codes) : wgmma_desc_sw128(q_wg, 16, 1024);
  const uint64_t k_desc0 = kQCodes ? fp8_desc(k_smem) : wgmma_desc_sw128(k_smem, 16, 1024);
  const uint64_t v_desc0 = wgmma_desc_sw128(v_smem, kKvColBytes, 1024);
  // kRefined: the descriptors pass through wgmma_desc_opaque at each use, so each k-step's
  // address is computed where it is issued rather than held in registers across the loop.
  auto desc = [](uint64_t d) { return kRefined ? wgmma_desc_opaque(d) : d; };
  auto issue_s = [&](int j) {
    const uint64_t q_desc = desc(q_desc0);
    const uint64_t k_desc = desc(k_desc0 + (j % kStages) * (Shape::kKTileBytes >> 4));
    if constexpr (kI8) {
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) {
        si[n][0] = si[n][1] = si[n][2] = si[n][3] = __float_as_int(kIntBias);
      }
      wgmma_fence_operands(si);
      wgmma_fence();
      // Four (head dim 128) or two k-steps of 32 channels, exact in int32.
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk) {
        wgmma_s8_ss(si, q_desc + ((kk * 32) >> 4), k_desc + ((kk * 32) >> 4), true);
      }
      wgmma_commit();
      return;
    }
    // The 16-bit products' first k-step overwrites S (wgmma_16_ss_first): S's registers still
    // hold the last tile's P, which nothing reads any more.
    if constexpr (Shape::kFp8 || !kRefined) wgmma_fence_operands(s);
    wgmma_fence();
    if constexpr (Shape::kFp8) {
      // k-step kk: 32 codes, 32 bytes into the key rows. The four k-steps of a 128-channel head
      // accumulate on the tensor cores before S leaves them in fp32: the two-level
      // accumulation's bound of four k-tiles (docs/kv-quant.md).
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk) {
        wgmma_fp8_ss<kKv>(s, q_desc + ((kk * 32) >> 4), k_desc + ((kk * 32) >> 4), kk > 0);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        // k-step kk: 32 bytes into its atom column.
        const uint64_t qk = q_desc + (((kk / 4) * kQColBytes + (kk % 4) * 32) >> 4);
        const uint64_t kd = k_desc + (((kk / 4) * kKvColBytes + (kk % 4) * 32) >> 4);
        if (kRefined && kk == 0) {
          wgmma_16_ss_first<kT, kN>(s, qk, kd);
        } else {
          wgmma_16_ss<kT, kN>(s, qk, kd, kk > 0);
        }
      }
    }
    wgmma_commit();
  };
  // O = alpha O + P V_j (P from the last softmax).
  auto issue_pv = [&](int j) {
#pragma unroll
    for (int jj = 0; jj < kDimTiles; ++jj) {
      o[jj][0] *= alpha_a;
      o[jj][1] *= alpha_a;
      o[jj][2] *= alpha_b;
      o[jj][3] *= alpha_b;
    }
    wgmma_fence_operands(pf);
    wgmma_fence_operands(o);
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kN / 16; ++kc) {
      // Keys 16 kc .. 16 kc + 15: two 8-key atoms, 2048 bytes on.
      if constexpr (kRefined) {
        wgmma_16_rs_mn<kT, kHeadDim>(
            o, pf[kc], desc(v_desc0 + (j % kStages) * (kTileBytes >> 4)) + kc * (2048 >> 4), true);
      } else {
        wgmma_16_rs_mn<kT, kHeadDim>(
            o, pf[kc], v_desc0 + (j % kStages) * (kTileBytes >> 4) + kc * (2048 >> 4), true);
      }
    }
    wgmma_commit();
  };
  auto release = [&](uint64_t* bars, int j) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bars + j % kStages);
  };
  // K_j's stage back to the producer. INT8's holds the K scales each thread reads itself, so
  // every thread arrives after its own reads (not one lane after __syncwarp).
  auto release_k = [&](int j) {
    if constexpr (kI8) {
      mbarrier_arrive(empty_k + j % kStages);
    } else {
      release(empty_k, j);
    }
  };
  // S_j complete: INT8's integer sums become scores, each column times its key's scale (staged
  // with K_j, so before K_j is released). Stale keys' scales may be anything; their scores are
  // masked.
  auto scores_done = [&](int j) {
    if constexpr (kI8) {
      wgmma_fence_operands(si);
      const uint16_t* const k_scales = stats_stage(0, j % kStages);
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) {
        const float2 f =
            f16x2_to_float2(*reinterpret_cast<const uint32_t*>(k_scales + 8 * n + 2 * t));
        s[n][0] = (__int_as_float(si[n][0]) - kIntBias) * f.x;
        s[n][1] = (__int_as_float(si[n][1]) - kIntBias) * f.y;
        s[n][2] = (__int_as_float(si[n][2]) - kIntBias) * f.x;
        s[n][3] = (__int_as_float(si[n][3]) - kIntBias) * f.y;
      }
    } else {
      wgmma_fence_operands(s);
    }
  };
  // Masks S_j (causal, window, tile end) where this warp's rows need it and turns it into
  // P = 2^(S scale - m) in place, updating m, l and alpha; P = 0 for a warp with no key here.
  auto softmax = [&](int j) {
    const int tile = kv_lo + (num_tiles - 1 - j) * kN;  // the last tile first
    alpha_a = alpha_b = 1.0f;
    if (!(warp_active && tile < w_hi && tile + kN > w_lo)) {
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      return;
    }
    const bool need_mask = tile + kN > w_all ||
                           (a.window_left >= 0 && tile < offset + w_r0 + 15 - a.window_left);
    // A key is attended by a row iff it lies below the row's split (<= pos + 1 and <= kv_hi:
    // the causal bound, or INT4's newest-blocks one), below kv_hi, and inside its window.
    auto attended = [&](int n, int e) {
      const int tok = tile + 8 * n + 2 * t + (e & 1);
      const int pos = e < 2 ? pos_a : pos_b;
      return tok < (e < 2 ? split_a : split_b) && tok < kv_hi &&
             (a.window_left < 0 || tok >= pos - a.window_left);
    };
    float mx_a = -INFINITY, mx_b = -INFINITY;
    if constexpr (kRefined) {
      // Only the tiles at the diagonal, the window's edge or the sequence's end (one or two of
      // a warp's) are masked; the others go straight to the row maxima.
      if (need_mask) {
#pragma unroll
        for (int n = 0; n < kTokTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (!attended(n, e)) s[n][e] = -INFINITY;
          }
        }
      }
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) {
        mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
      }
    } else {
#pragma unroll
      for (int n = 0; n < kTokTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int tok = tile + 8 * n + 2 * t + (e & 1);
          const int pos = e < 2 ? pos_a : pos_b;
          const bool ok = !need_mask || (tok < (e < 2 ? split_a : split_b) && tok < kv_hi &&
                                         (a.window_left < 0 || tok >= pos - a.window_left));
          if (!ok) s[n][e] = -INFINITY;
        }
        mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    const float new_a = fmaxf(m_a, mx_a * scale_a);
    const float new_b = fmaxf(m_b, mx_b * scale_b);
    // A row with nothing attended yet keeps m = -inf: its p are 0 and its scale 1.
    alpha_a = new_a == -INFINITY ? 1.0f : fast_exp2(m_a - new_a);
    alpha_b = new_b == -INFINITY ? 1.0f : fast_exp2(m_b - new_b);
    const float base_a = new_a == -INFINITY ? 0.0f : new_a;
    const float base_b = new_b == -INFINITY ? 0.0f : new_b;
    m_a = new_a;
    m_b = new_b;
    l_a *= alpha_a;
    l_b *= alpha_b;
#pragma unroll
    for (int n = 0; n < kTokTiles; ++n) {
      s[n][0] = fast_exp2(fmaf(s[n][0], scale_a, -base_a));
      s[n][1] = fast_exp2(fmaf(s[n][1], scale_a, -base_a));
      s[n][2] = fast_exp2(fmaf(s[n][2], scale_b, -base_b));
      s[n][3] = fast_exp2(fmaf(s[n][3], scale_b, -base_b));
      l_a += s[n][0] + s[n][1];
      l_b += s[n][2] + s[n][3];
    }
  };
  // P's accumulator layout is the A-fragment layout of P V.
  auto pack_p = [&]() {
#pragma unroll
    for (int kc = 0; kc < kN / 16; ++kc) {
      pf[kc][0] = pack2<kT>(s[2 * kc][0], s[2 * kc][1]);
      pf[kc][1] = pack2<kT>(s[2 * kc][2], s[2 * kc][3]);
      pf[kc][2] = pack2<kT>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      pf[kc][3] = pack2<kT>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
    }
  };

  // kTurns: the consumers take turns issuing their products (FlashAttention-3's ping-pong).
  // Consumer wg issues a turn's wgmmas once the other has issued its own (named barrier 3 + wg
  // of 256 threads: its own 128 wait, the other's 128 arrive), then lets the other go. The
  // tensor cores then run one consumer's S_j and P_{j-1} V_{j-1} while the other's softmax runs,
  // instead of both softmaxes running at once with the tensor cores idle. Each consumer takes
  // num_tiles + 1 turns (S_0; S_j with P_{j-1} V_{j-1}; the last P V), consumer 0 first;
  // consumer 1's last turn lets nobody go, so no arrival is pending at exit.
  const uint32_t turn_bar = 3 + wg;  // 1 + wg: the Q loads
  const uint32_t other_turn_bar = 3 + (wg ^ 1);
  auto turn_begin = [&]() {
    if constexpr (kTurns) named_barrier_sync(turn_bar, 256);
  };
  auto turn_end = [&](bool last) {
    if constexpr (kTurns) {
      if (!(last && wg == 1)) named_barrier_arrive(other_turn_bar, 256);
    }
  };

  // Software-pipelined: iteration j issues S_j and P_{j-1} V_{j-1} together, then runs tile j's
  // softmax under the second product. Every consumer runs every tile of the block (a warp past
  // its rows' keys with P = 0), so both take the same number of turns.
  // INT4: a block whose rows read only the newest blocks has no tile (o = 0, lse = -inf).
  if (num_tiles > 0) {
    if (kTurns && wg == 1) named_barrier_arrive(3, 256);  // consumer 0's first turn
    mbarrier_wait(full_k, 0);
    fence_proxy_async();
    turn_begin();
    issue_s(0);
    turn_end(false);
    wgmma_wait_all();
    scores_done(0);
    release_k(0);
    softmax(0);
    pack_p();
    for (int j = 1; j < num_tiles; ++j) {
      mbarrier_wait(full_k + j % kStages, (j / kStages) & 1);
      mbarrier_wait(full_v + (j - 1) % kStages, ((j - 1) / kStages) & 1);
      fence_proxy_async();
      turn_begin();
      issue_s(j);
      issue_pv(j - 1);
      turn_end(false);
      if constexpr (kOverlap) {
        wgmma_wait<1>();  // S_j
        scores_done(j);
        release_k(j);
        softmax(j);
        wgmma_wait_all();  // P_{j-1} V_{j-1}
        wgmma_fence_operands(o);
        release(empty_v, j - 1);
      } else {
        wgmma_wait_all();  // S_j and P_{j-1} V_{j-1}
        scores_done(j);
        release_k(j);
        wgmma_fence_operands(o);
        release(empty_v, j - 1);
        softmax(j);
      }
      pack_p();
    }
    mbarrier_wait(full_v + (num_tiles - 1) % kStages, ((num_tiles - 1) / kStages) & 1);
    fence_proxy_async();
    turn_begin();
    issue_pv(num_tiles - 1);
    turn_end(true);
    wgmma_wait_all();
    wgmma_fence_operands(o);
    release(empty_v, num_tiles - 1);
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  if (!warp_active) return;
  // out_scale: FP8's V scale (1 for 16-bit caches).
  const float inv_a = l_a > 0.0f ? a.out_scale / l_a : 0.0f;
  const float inv_b = l_b > 0.0f ? a.out_scale / l_b : 0.0f;
  TQ* o_head = static_cast<TQ*>(a.o) + head * kHeadDim;
  if constexpr (kI4) {
    // The int4 part's log-sum-exps (log2 units), which the newest part's launch merges by.
    float* const lse = a.lse + head;
    if (t == 0 && row_a < q_len) {
      lse[static_cast<int64_t>(q_begin + row_a) * a.num_qo_heads] = row_lse2(m_a, l_a);
    }
    if (t == 0 && row_b < q_len) {
      lse[static_cast<int64_t>(q_begin + row_b) * a.num_qo_heads] = row_lse2(m_b, l_b);
    }
  }
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) {
    const int col = 8 * j + 2 * t;
    if (row_a < q_len) {
      *reinterpret_cast<uint32_t*>(o_head + (q_begin + row_a) * a.o_token_stride + col) =
          pack2<kQ>(o[j][0] * inv_a, o[j][1] * inv_a);
    }
    if (row_b < q_len) {
      *reinterpret_cast<uint32_t*>(o_head + (q_begin + row_b) * a.o_token_stride + col) =
          pack2<kQ>(o[j][2] * inv_b, o[j][3] * inv_b);
    }
  }
}

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no libcuda link).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                             cudaEnableDefault, &found);
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p)
               : nullptr;
  }();
  return fn;
}

// The bulk tensor copy's view of one layer's K or V pool (base = its block 0): 4-d, [block][KV
// head][token][channel] by the view's strides (in elements of elem_bytes), rows of row_elems
// (head_dim; INT4: its head_dim / 2 bytes), boxes of box_channels x block_size tokens of one
// head, written with `swizzle`. The pool's block count
// is not in the view; the copies address only blocks of the block tables, so the outer extent
// is a bound, not the pool's size.
inline Status kv_tensor_map(CUtensorMap* map, const void* base, const PagedKvCacheView& c,
                            CUtensorMapDataType type, int elem_bytes, int row_elems,
                            int box_channels, CUtensorMapSwizzle swizzle) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return Status::Internal("cuTensorMapEncodeTiled is not available");
  const auto eb = static_cast<cuuint64_t>(elem_bytes);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(row_elems),
                              static_cast<cuuint64_t>(c.block_size),
                              static_cast<cuuint64_t>(c.num_kv_heads), cuuint64_t{1} << 31};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(c.token_stride) * eb,
                                 static_cast<cuuint64_t>(c.head_stride) * eb,
                                 static_cast<cuuint64_t>(c.block_stride) * eb};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_channels),
                             static_cast<cuuint32_t>(c.block_size), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, type, 4, const_cast<void*>(base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::Internal("cuTensorMapEncodeTiled failed (" +
                            std::to_string(static_cast<int>(r)) + ")");
  }
  return Status::Ok();
}

// Launches the warp-specialized kernel for a 16-bit, FP8 or INT8 cache's whole key range, or
// an INT4 cache's int4 part (its lse_workspace then holds the rows' log-sum-exps for the
// newest part's launch). Head packing as launch_prefill's, over 8 warps' rows: the largest
// power of two dividing the group, at most 8.
template <DType kQ, DType kKv, int kHeadDim, PrefillWsVariant kVariant>
Status launch_prefill_ws(const PrefillAttentionParams& p, cudaStream_t stream) {
  using Shape = PrefillWsShape<kKv, kHeadDim, prefill_ws_stages(kKv, kVariant)>;
  constexpr bool kCodes = Shape::kCodes;
  auto* kernel = prefill_ws_kernel<kQ, kKv, kHeadDim, kVariant>;
  static const cudaError_t configured = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Shape::kSmemBytes));
  STRATA_CUDA_CHECK(configured);
  const PagedKvCacheView& c = p.cache;
  PrefillWsArgs args{};
  // 16-bit: 64-channel boxes in the swizzle the products read. Codes: whole rows, into the
  // staging ring unswizzled (FP8's and INT8's K: into the ring S reads, in the kHeadDim-byte
  // swizzle).
  const CUtensorMapDataType type = kCodes                ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : kKv == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const int elem_bytes = kCodes ? 1 : 2;
  const int row = kCodes ? Shape::kCodeRowBytes : kHeadDim;
  const int box = kCodes ? row : 64;
  const CUtensorMapSwizzle swizzle =
      kCodes ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B;
  const CUtensorMapSwizzle k_swizzle = !Shape::kQCodes   ? swizzle
                                       : kHeadDim == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                         : CU_TENSOR_MAP_SWIZZLE_64B;
  STRATA_RETURN_IF_ERROR(
      kv_tensor_map(&args.k_map, c.k_data, c, type, elem_bytes, row, box, k_swizzle));
  STRATA_RETURN_IF_ERROR(
      kv_tensor_map(&args.v_map, c.v_data, c, type, elem_bytes, row, box, swizzle));
  args.a = prefill_kernel_args(p, Shape::kRows, 8);
  PrefillKernelArgs& a = args.a;
  a.newest_blocks = p.newest.blocks;
  a.lse = p.lse_workspace;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.max_q_len, a.tokens_per_block)),
                  static_cast<unsigned>(c.num_kv_heads * a.head_tiles),
                  static_cast<unsigned>(p.layout.num_seqs));
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(args);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda::detail

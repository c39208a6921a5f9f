#pragma once
// The sparse MoE layer on the GPU (Mixtral, Qwen3-MoE, DeepSeek-V2/V3): routing, the grouping of
// (token, slot) pairs by expert, the experts' grouped GEMMs and the weighted combine, each a
// launcher over device pointers (docs/kernels.md, "MoE layer"). The CPU engine's moe_block.h
// is the reference these follow step for step:
//
//   logits [T, E] --moe_route--> experts, weights [T, k] (each token's ascending by id)
//     --moe_permute--> expert_offsets [E + 1], row_of [T, k], token_of [T k], the tile table
//     --moe_grouped_gemm (gate | up, SiLU-and-mul, A's rows gathered through token_of: expert 0's
//       rows first, each expert's in token order)--> act [T k, inter] bf16
//     --moe_grouped_gemm (down)--> y [T k, hidden] (f32 or bf16)
//     --moe_combine--> out [T, hidden] = (out +) sum over j of weights[t, j] y[row_of[t, j]]
//
// Every count lives on the device: the launches' grids depend only on (T, k, E, sizes), never on
// the routing, so the whole layer can be captured in a CUDA graph (no host sync). The grouped
// GEMM's grid covers max_tiles row tiles (an upper bound); tiles past the device's num_tiles exit.
// Every kernel is launched with programmatic dependent launch (pdl.cuh) and waits for the one
// before it ahead of any memory access, so the chain's launches overlap their predecessors' tails.
//
// Determinism and batch invariance: routing reads only the token's own logits; the grouping is a
// stable counting sort (no atomics decide an order); every GEMM output element is one thread's
// fp32 sum over k in one fixed order (16-wide mma steps in ascending k, no split-k) whatever the
// tile shape, so a row's bits depend on neither the other rows nor the config chosen for the
// batch's size; the combine sums a token's k rows in ascending expert id. A token's output is
// therefore bit-identical run twice, alone or in any batch.
//
// Weights: each expert's gate | up is one [2 inter, hidden] bf16 matrix (gate_proj's rows then
// up_proj's, as the dense Gemm's kSiluAndMul takes), experts at a fixed stride; down_proj is
// [hidden, inter] per expert, likewise.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::cuda {

inline constexpr int32_t kMoeMaxExperts = 1024;
inline constexpr int32_t kMoeMaxTopK = 32;
inline constexpr int32_t kMoeMaxGroups = 32;

enum class MoeScoring { kSoftmax, kSigmoid };
// kGreedy: top-k over all experts. kGroupLimitedGreedy (DeepSeek-V2): groups ranked by their best
// score. kNoAuxTc (DeepSeek-V3): groups ranked by the sum of their two best (bias-corrected)
// scores.
enum class MoeTopk { kGreedy, kGroupLimitedGreedy, kNoAuxTc };

struct MoeRouteParams {
  const void* logits = nullptr;       // [num_tokens, num_experts] logits_dtype, rows contiguous
  DType logits_dtype = DType::kF32;   // F32 or BF16
  const float* score_bias = nullptr;  // nullable, [num_experts] (V3's e_score_correction_bias)
  int32_t* experts = nullptr;         // [num_tokens, top_k] out, each row ascending
  float* weights = nullptr;           // [num_tokens, top_k] out, matching experts
  int32_t num_tokens = 0, num_experts = 0, top_k = 0;
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopk topk_method = MoeTopk::kGreedy;
  int32_t num_groups = 1, topk_groups = 1;  // grouped methods: num_experts % num_groups == 0
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

// One warp per token, as moe_block.cc's route_tokens: softmax (or sigmoid) scores, the k largest
// among the allowed experts (ties to the lower id), ascending by id; the weights are the scores,
// over their sum when norm_topk_prob, times routed_scaling_factor. The DeepSeek form (sigmoid, a
// grouped method, a scaling factor other than 1 or a bias) adds 1e-20 to the sum, as the CPU does.
// NaN scores never beat a number (the CPU keeps a NaN found first as its best: NaN logits are the
// one input where the two may differ); slots left without a candidate take the lowest free ids, so
// every id written is a valid expert. InvalidArgument outside the limits above.
Status moe_route(const MoeRouteParams& p, cudaStream_t stream);

// Row tiles of the grouped GEMM: kSmall (16 rows, for a few rows per expert: decode) or kLarge
// (64 rows). The results are the same bits under either.
enum class MoeTileConfig { kSmall, kLarge };
int32_t moe_tile_rows(MoeTileConfig c);
// The config for a batch of num_tokens: kLarge once the average expert has 32 rows.
MoeTileConfig moe_choose_tile_config(int64_t num_tokens, int32_t top_k, int32_t num_experts);
// An upper bound of the row tiles a batch can need: min(E, T k) + T k / tile_rows.
int32_t moe_max_tiles(int64_t num_tokens, int32_t top_k, int32_t num_experts, MoeTileConfig c);

struct MoePermuteParams {
  const int32_t* experts = nullptr;  // [num_tokens, top_k], ids in [0, num_experts)
  int32_t num_tokens = 0, top_k = 0, num_experts = 0;
  int32_t* expert_offsets = nullptr;  // [num_experts + 1] out: expert e's rows [off[e], off[e+1])
  int32_t* row_of = nullptr;          // [num_tokens, top_k] out: the row of (token, j)
  int32_t* token_of = nullptr;        // [num_tokens * top_k] out: the token of each row
  // The grouped GEMM's tile table: tile i covers rows [tile_row[i], min(+tile_rows, end of its
  // expert)) of expert tile_expert[i], for i < *num_tiles (<= max_tiles).
  MoeTileConfig tile_config = MoeTileConfig::kSmall;
  int32_t max_tiles = 0;           // moe_max_tiles(...)
  int32_t* tile_expert = nullptr;  // [max_tiles] out
  int32_t* tile_row = nullptr;     // [max_tiles] out
  int32_t* num_tiles = nullptr;    // [1] out
};
// One block: a stable counting sort of the pairs (in token order) by expert, as moe_block.cc's
// group_by_expert. InvalidArgument for sizes out of range.
Status moe_permute(const MoePermuteParams& p, cudaStream_t stream);

struct MoeGatherParams {
  const void* x = nullptr;  // [num_tokens, ldx] bf16
  int64_t ldx = 0;
  const int32_t* token_of = nullptr;  // [num_rows]
  void* rows = nullptr;               // [num_rows, hidden] bf16 out
  int32_t num_rows = 0;
  int32_t hidden = 0;  // a multiple of 8; x and rows 16-byte aligned, ldx a multiple of 8
};
Status moe_gather(const MoeGatherParams& p, cudaStream_t stream);

enum class MoeGemmEpilogue { kNone, kSiluAndMul };

struct MoeGemmParams {
  const void* a = nullptr;  // [num_rows, lda] bf16, the expert-sorted rows (or, with a_row_of,
  int64_t lda = 0;          // the rows they are gathered from)
  // Nullable [num_rows]: row r of the product reads row a_row_of[r] of a (moe_permute's token_of:
  // the gather fused into the A loads, no expert-sorted copy of the tokens).
  const int32_t* a_row_of = nullptr;
  const void* w = nullptr;  // [num_experts, n, ldw] bf16: expert e at w + e * w_expert_stride
  int64_t ldw = 0;
  int64_t w_expert_stride = 0;  // elements
  void* d = nullptr;            // [num_rows, ldd] d_dtype (kSiluAndMul: n / 2 columns, BF16)
  int64_t ldd = 0;
  DType d_dtype = DType::kBF16;  // BF16 or F32
  int32_t n = 0, k = 0;          // k a multiple of 8; kSiluAndMul: n even, the product gate | up
  MoeGemmEpilogue epilogue = MoeGemmEpilogue::kNone;
  const int32_t* expert_offsets = nullptr;  // [num_experts + 1], from moe_permute
  const int32_t* tile_expert = nullptr;     // [max_tiles], from moe_permute
  const int32_t* tile_row = nullptr;        // [max_tiles]
  const int32_t* num_tiles = nullptr;       // [1]
  int32_t max_tiles = 0;
  MoeTileConfig tile_config = MoeTileConfig::kSmall;  // the one moe_permute built the table for
};
// d[r, :] = a[r, :] w_e^T for every row r of expert e (kSiluAndMul: act = bf16(silu(bf16 gate) *
// bf16 up), silu_mul.cuh's form). mma.sync m16n8k16 over a cp.async pipeline; each weight tile is
// read once per row tile, so an expert with at most tile_rows rows reads its weights once.
// InvalidArgument for misaligned or out-of-contract arguments.
Status moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream);

struct MoeCombineParams {
  const void* y = nullptr;  // [num_tokens * top_k, hidden] y_dtype, the experts' rows
  DType y_dtype = DType::kF32;
  const int32_t* row_of = nullptr;  // [num_tokens, top_k]
  const float* weights = nullptr;   // [num_tokens, top_k]
  void* out = nullptr;              // [num_tokens, ldo] out_dtype
  int64_t ldo = 0;
  DType out_dtype = DType::kF32;  // F32 or BF16
  bool accumulate = false;        // out += the sum (F32 only), e.g. into the residual
  int32_t num_tokens = 0, top_k = 0, hidden = 0;
};
// out[t, i] = (out[t, i] +) sum_j weights[t, j] * y[row_of[t, j], i], j ascending (fp32, one
// rounding of the sum, one more for the accumulate).
Status moe_combine(const MoeCombineParams& p, cudaStream_t stream);

// The experts' half of the layer after routing: permute, gate | up (the gather fused into its A
// loads), down, combine: four launches. The caller adds shared experts (DeepSeek) to out itself.
// (moe_gather makes the expert-sorted copy of the tokens for callers that want one.)
struct MoeExpertsParams {
  const void* x = nullptr;           // [num_tokens, hidden] bf16
  const int32_t* experts = nullptr;  // [num_tokens, top_k], from moe_route
  const float* weights = nullptr;    // [num_tokens, top_k]
  const void* w_gate_up = nullptr;   // [num_experts, 2 inter, hidden] bf16
  const void* w_down = nullptr;      // [num_experts, hidden, inter] bf16
  void* out = nullptr;               // [num_tokens, hidden] out_dtype
  DType out_dtype = DType::kF32;
  bool accumulate = false;
  DType y_dtype = DType::kF32;  // the down projection's rows before the combine
  int32_t num_tokens = 0, top_k = 0, num_experts = 0, hidden = 0, inter = 0;
  // Forces a tile config (tests); otherwise moe_choose_tile_config.
  bool force_tile_config = false;
  MoeTileConfig tile_config = MoeTileConfig::kSmall;
};
// Scratch bytes for up to max_tokens tokens (256-byte aligned pieces).
int64_t moe_workspace_bytes(int64_t max_tokens, int32_t top_k, int32_t num_experts, int32_t hidden,
                            int32_t inter);
Status moe_experts_forward(const MoeExpertsParams& p, void* workspace, int64_t workspace_bytes,
                           cudaStream_t stream);

}  // namespace strata::cuda

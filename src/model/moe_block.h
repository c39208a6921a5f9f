#pragma once
// The sparse MoE block's CPU forward pass (Mixtral, Qwen3-MoE): out = sum over a token's top-k
// experts e of weight_e * down_e(silu(gate_e x) * up_e x).
//
//   router logits = x R^T (fp32)  ->  per token: softmax over every expert, the k largest
//   probabilities (ties to the lower expert id), / their sum when norm_topk_prob
//   -> the batch's rows gathered by expert (a counting sort: expert 0's tokens first, each
//   expert's in token order) -> per expert with tokens: gate, up (linear), SiLU-mul, down
//   -> per token: its k expert rows summed in ascending expert id.
//
// Determinism: a token's routing reads only its own router logits, every expert row is one
// linear() row (whose value does not depend on the other rows, cpu/linear.h), and each token sums
// its experts in one fixed order. So a token's output is bit-identical alone or in any batch,
// chunking or thread count.
//
// DeepSeek (MoeConfig's routing fields): grouped top-k over softmax or sigmoid scores (V3 choosing
// by score + e_score_correction_bias), weights times routed_scaling_factor, and the shared
// experts' MLP over every token added to the routed sum.
//
// Cost: 2 * hidden * num_experts flops per token for the router, then 6 * hidden *
// moe_intermediate * k per token for the experts; each expert's weights are read once per call if
// any token routes to it (a decode step of few tokens reads only the experts it hits). Scratch:
// (2 * hidden + 2 * moe_intermediate) * k floats per token.

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/hf_config.h"
#include "model/moe_weights.h"

namespace strata::model {

// Reused buffers of moe_forward, grown to the largest batch seen.
struct MoeScratch {
  std::vector<float> logits;          // [num_tokens, num_experts]
  std::vector<int32_t> experts;       // [num_tokens, k], each token's ascending
  std::vector<float> weights;         // [num_tokens, k], matching experts
  std::vector<int64_t> expert_begin;  // [num_experts + 1]: expert e's rows in rows/out
  std::vector<int64_t> row_of;        // [num_tokens, k]: the row of (token, j)
  std::vector<int64_t> token_of;      // [num_tokens * k]: the token of each row
  std::vector<float> rows, gate, up, out;
  std::vector<float> score_bias;                          // [num_experts] (DeepSeek-V3), as f32
  std::vector<float> shared_gate, shared_up, shared_out;  // the shared experts' (DeepSeek)
};

// Routes num_tokens tokens from their router logits [num_tokens, num_experts] (overwritten with
// the scores: softmax probabilities, or DeepSeek-V3's sigmoids): experts and weights
// [num_tokens, k] receive each token's chosen experts in ascending id and their weights
// (renormalized to sum to 1 when norm_topk_prob). DeepSeek's configs (MoeConfig's scoring,
// topk_method, groups, routed_scaling_factor) route as transformers' DeepseekV2TopkRouter /
// DeepseekV3TopkRouter do; score_bias ([num_experts] or empty) is V3's e_score_correction_bias,
// added to the scores only to choose the experts.
void route_tokens(const MoeConfig& config, float* logits, int64_t num_tokens, int32_t* experts,
                  float* weights, ThreadPool& pool, std::span<const float> score_bias = {});

// out [num_tokens, hidden] = the MoE block of x [num_tokens, hidden] (fp32, not overlapping).
// InvalidArgument when the weights do not match the config; the kernels' errors as they come.
Status moe_forward(const MoeConfig& config, const MoeWeights& w, const float* x, int64_t num_tokens,
                   float* out, MoeScratch& scratch, ThreadPool& pool);

}  // namespace strata::model

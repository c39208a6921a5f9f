#pragma once
// The tensors of a sparse MoE block (Mixtral, Qwen3-MoE): a router and num_experts SwiGLU
// experts. Names, shapes and binding, for the two ways checkpoints store them:
//
//   per expert (the Hugging Face hub's checkpoints, and what transformers 5 save_pretrained
//   writes back):
//     Mixtral    model.layers.N.block_sparse_moe.gate.weight          [E, hidden]
//                model.layers.N.block_sparse_moe.experts.E.w1.weight  [I, hidden]  (gate)
//                model.layers.N.block_sparse_moe.experts.E.w3.weight  [I, hidden]  (up)
//                model.layers.N.block_sparse_moe.experts.E.w2.weight  [hidden, I]  (down)
//     Qwen3-MoE  model.layers.N.mlp.gate.weight                       [E, hidden]
//                model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight
//   fused (transformers 5's in-memory layout, both architectures):
//     model.layers.N.mlp.gate.weight                 [E, hidden]
//     model.layers.N.mlp.experts.gate_up_proj        [E, 2 * I, hidden]  (gate rows, then up)
//     model.layers.N.mlp.experts.down_proj           [E, hidden, I]
//   DeepSeek-V2 / V3 (Qwen3-MoE's names, plus):
//     model.layers.N.mlp.gate.e_score_correction_bias          [E]  (V3: chooses, never weighs)
//     model.layers.N.mlp.shared_experts.{gate,up}_proj.weight  [n_shared * I, hidden]
//     model.layers.N.mlp.shared_experts.down_proj.weight       [hidden, n_shared * I]
//
// Fused tensors are bound as per-expert views into them: no copy either way.

#include <cstdint>
#include <vector>

#include "core/tensor_view.h"
#include "model/hf_config.h"
#include "model/weight_store.h"

namespace strata::model {

struct ExpertWeights {
  TensorView gate_proj, up_proj;  // [moe_intermediate, hidden]
  TensorView down_proj;           // [hidden, moe_intermediate]
};

// Empty (no router, no experts) for a dense layer.
struct MoeWeights {
  TensorView router;                   // [num_experts, hidden]
  std::vector<ExpertWeights> experts;  // [num_experts]
  // DeepSeek (MoeConfig): e_score_correction_bias [num_experts] (V3), the shared experts' MLP
  // ([shared_intermediate, hidden] gate / up, [hidden, shared_intermediate] down); else empty.
  TensorView score_bias;
  ExpertWeights shared;
};

// Appends MoE layer layer_idx's tensors, per-expert layout, to shapes (dummy weights, plans).
void append_moe_tensors(const ModelConfig& config, int64_t layer_idx, TensorShapes& shapes);

// Binds MoE layer layer_idx, fused when the store holds `mlp.experts.gate_up_proj`, else per
// expert. Throws strata::Error naming the tensor when one is missing or has the wrong shape.
MoeWeights bind_moe_weights(const ModelConfig& config, const WeightStore& store, int64_t layer_idx);

}  // namespace strata::model

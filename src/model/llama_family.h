#pragma once
// The Llama family of decoders: LlamaForCausalLM (Llama 2, 3, 3.1, 3.2), MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM and Gemma3ForCausalLM share one block structure and Hugging
// Face's tensor names; they differ only in flags of ModelConfig (biases, q/k norms, tied
// embeddings, sliding windows, RoPE scaling, Gemma 3's norms, embedding scale and GeGLU). This
// file names their tensors, with shapes, and binds them to views.
//
//   h = embed(ids)                                  [* sqrt(hidden) (Gemma 3)]
//   per layer:  x = rms_norm(h);  q,k,v = x W^T (+ b);  [q,k = rms_norm per head (Qwen3, Gemma 3)]
//               q,k = rope(q,k);  append k,v to the paged cache;  a = paged_attention(q)
//               h += a Wo^T (+ b)                   [h += rms_norm(a Wo^T) (Gemma 3)]
//               x = rms_norm(h);  h += (silu(x Wg^T) * (x Wu^T)) Wd^T
//                                                   [gelu_tanh, h += rms_norm(mlp) (Gemma 3)]
//   logits = rms_norm(h) Wlm^T      (Wlm = embed when tie_word_embeddings)
// Gemma 3's RMSNorms multiply by (1 + weight); its global and sliding layers rotate by RoPE of
// their own.
// MixtralForCausalLM and Qwen3MoeForCausalLM are the same blocks with a sparse MoE block in place
// of the MLP (of every layer, or the layers ModelConfig::moe marks): its router and experts are
// named and bound by moe_weights.h, and LayerWeights::moe holds them.
//
// DeepseekV2ForCausalLM and DeepseekV3ForCausalLM are the same blocks with Multi-head Latent
// Attention in place of q/k/v (mla_attention.h) and DeepSeek's MoE block (shared experts, grouped
// routing) in the layers ModelConfig::moe marks.
//
// GQA and MQA keep K/V at num_key_value_heads: nothing here repeats KV heads.

#include <vector>

#include "core/tensor_view.h"
#include "model/hf_config.h"
#include "model/moe_weights.h"
#include "model/weight_store.h"

namespace strata::model {

struct LayerWeights {
  TensorView input_norm;                 // [hidden]
  TensorView q_proj, k_proj, v_proj;     // [heads * head_dim, hidden], [kv_heads * head_dim, hidden]
  TensorView q_bias, k_bias, v_bias;     // [out] or empty
  TensorView q_norm, k_norm;             // [head_dim] or empty
  TensorView o_proj;                     // [hidden, heads * head_dim]
  TensorView o_bias;                     // [hidden] or empty
  TensorView post_attention_norm;        // [hidden]: the MLP's input norm
  // [hidden] or empty: Gemma 3's norms of the attention's and the MLP's outputs, before their
  // residual adds (its post_attention_layernorm and post_feedforward_layernorm; its
  // pre_feedforward_layernorm is post_attention_norm above).
  TensorView attn_output_norm, mlp_output_norm;
  TensorView gate_proj, up_proj;         // [intermediate, hidden]
  TensorView down_proj;                  // [hidden, intermediate]
  TensorView gate_bias, up_bias, down_bias;  // or empty
  MoeWeights moe;  // an MoE layer's router and experts (then the dense MLP's views are empty)
  // DeepSeek's Multi-head Latent Attention (ModelConfig::mla; then k_proj / v_proj are empty,
  // q_proj is [heads * qk_head_dim, hidden] or empty under q LoRA, and o_proj is
  // [hidden, heads * v_head_dim]).
  TensorView q_a_proj;   // [q_lora_rank, hidden]
  TensorView q_a_norm;   // [q_lora_rank]
  TensorView q_b_proj;   // [heads * qk_head_dim, q_lora_rank]
  TensorView kv_a_proj;  // [kv_lora_rank + qk_rope_head_dim, hidden] (kv_a_proj_with_mqa)
  TensorView kv_a_norm;  // [kv_lora_rank]
  TensorView kv_b_proj;  // [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
};

struct DecoderWeights {
  TensorView embed;       // [vocab, hidden]
  std::vector<LayerWeights> layers;
  TensorView final_norm;  // [hidden]
  TensorView lm_head;     // [vocab, hidden]; the embedding when tied
};

// Every tensor the config requires, with its shape, in Hugging Face naming.
TensorShapes llama_family_tensors(const ModelConfig& config);

// Views of the store's tensors; throws strata::Error naming the tensor when one is missing or has
// the wrong shape.
DecoderWeights bind_llama_family(const ModelConfig& config, const WeightStore& store);

}  // namespace strata::model

#pragma once
// The Llama family of decoders: LlamaForCausalLM (Llama 2, 3, 3.1, 3.2), MistralForCausalLM,
// Qwen2ForCausalLM and Qwen3ForCausalLM share one block structure and Hugging Face's tensor names;
// they differ only in flags of ModelConfig (biases, q/k norms, tied embeddings, sliding windows,
// RoPE scaling). This file names their tensors, with shapes, and binds them to views.
//
//   h = embed(ids)
//   per layer:  x = rms_norm(h);  q,k,v = x W^T (+ b);  [q,k = rms_norm per head (Qwen3)]
//               q,k = rope(q,k);  append k,v to the paged cache;  a = paged_attention(q)
//               h += a Wo^T (+ b)
//               x = rms_norm(h);  h += (silu(x Wg^T) * (x Wu^T)) Wd^T
//   logits = rms_norm(h) Wlm^T      (Wlm = embed when tie_word_embeddings)
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
  TensorView post_attention_norm;        // [hidden]
  TensorView gate_proj, up_proj;         // [intermediate, hidden]
  TensorView down_proj;                  // [hidden, intermediate]
  TensorView gate_bias, up_bias, down_bias;  // or empty
  MoeWeights moe;  // an MoE layer's router and experts (then the dense MLP's views are empty)
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

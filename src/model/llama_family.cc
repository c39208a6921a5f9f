#include "model/llama_family.h"

#include <string>

namespace strata::model {
namespace {

// One tensor of a decoder layer: its name after "model.layers.N.", where it binds, its shape.
struct LayerTensor {
  const char* suffix;
  TensorView LayerWeights::*member;
  std::vector<int64_t> shape;
};

// The tensors a layer of this config has, in checkpoint order. The single source of truth for
// both the expected shapes (dummy weights, validation) and the binding.
// DeepSeek's MLA projections in place of q/k/v/o.
std::vector<LayerTensor> mla_tensors(const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  std::vector<LayerTensor> t;
  if (m.q_lora_rank > 0) {
    t.push_back({"self_attn.q_a_proj.weight", &LayerWeights::q_a_proj, {m.q_lora_rank, hidden}});
    t.push_back({"self_attn.q_a_layernorm.weight", &LayerWeights::q_a_norm, {m.q_lora_rank}});
    t.push_back({"self_attn.q_b_proj.weight",
                 &LayerWeights::q_b_proj,
                 {heads * m.qk_head_dim(), m.q_lora_rank}});
  } else {
    t.push_back(
        {"self_attn.q_proj.weight", &LayerWeights::q_proj, {heads * m.qk_head_dim(), hidden}});
  }
  t.push_back(
      {"self_attn.kv_a_proj_with_mqa.weight", &LayerWeights::kv_a_proj, {m.latent_dim(), hidden}});
  t.push_back({"self_attn.kv_a_layernorm.weight", &LayerWeights::kv_a_norm, {m.kv_lora_rank}});
  t.push_back({"self_attn.kv_b_proj.weight",
               &LayerWeights::kv_b_proj,
               {heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}});
  t.push_back({"self_attn.o_proj.weight", &LayerWeights::o_proj, {hidden, heads * m.v_head_dim}});
  return t;
}

std::vector<LayerTensor> layer_tensors(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, hd = c.head_dim;
  if (c.mla.enabled()) {
    std::vector<LayerTensor> t = {{"input_layernorm.weight", &LayerWeights::input_norm, {hidden}}};
    for (LayerTensor& x : mla_tensors(c)) t.push_back(std::move(x));
    t.push_back({"post_attention_layernorm.weight", &LayerWeights::post_attention_norm, {hidden}});
    t.push_back({"mlp.gate_proj.weight", &LayerWeights::gate_proj, {inter, hidden}});
    t.push_back({"mlp.up_proj.weight", &LayerWeights::up_proj, {inter, hidden}});
    t.push_back({"mlp.down_proj.weight", &LayerWeights::down_proj, {hidden, inter}});
    return t;
  }
  const int64_t q_out = c.num_attention_heads * hd, kv_out = c.num_key_value_heads * hd;
  std::vector<LayerTensor> t = {
      {"input_layernorm.weight", &LayerWeights::input_norm, {hidden}},
      {"self_attn.q_proj.weight", &LayerWeights::q_proj, {q_out, hidden}},
      {"self_attn.k_proj.weight", &LayerWeights::k_proj, {kv_out, hidden}},
      {"self_attn.v_proj.weight", &LayerWeights::v_proj, {kv_out, hidden}},
  };
  if (c.qkv_bias) {
    t.push_back({"self_attn.q_proj.bias", &LayerWeights::q_bias, {q_out}});
    t.push_back({"self_attn.k_proj.bias", &LayerWeights::k_bias, {kv_out}});
    t.push_back({"self_attn.v_proj.bias", &LayerWeights::v_bias, {kv_out}});
  }
  if (c.qk_norm) {
    t.push_back({"self_attn.q_norm.weight", &LayerWeights::q_norm, {hd}});
    t.push_back({"self_attn.k_norm.weight", &LayerWeights::k_norm, {hd}});
  }
  t.push_back({"self_attn.o_proj.weight", &LayerWeights::o_proj, {hidden, q_out}});
  if (c.o_bias) t.push_back({"self_attn.o_proj.bias", &LayerWeights::o_bias, {hidden}});
  if (c.sandwich_norms) {
    t.push_back({"post_attention_layernorm.weight", &LayerWeights::attn_output_norm, {hidden}});
    t.push_back({"pre_feedforward_layernorm.weight", &LayerWeights::post_attention_norm, {hidden}});
    t.push_back({"post_feedforward_layernorm.weight", &LayerWeights::mlp_output_norm, {hidden}});
  } else {
    t.push_back({"post_attention_layernorm.weight", &LayerWeights::post_attention_norm, {hidden}});
  }
  t.push_back({"mlp.gate_proj.weight", &LayerWeights::gate_proj, {inter, hidden}});
  t.push_back({"mlp.up_proj.weight", &LayerWeights::up_proj, {inter, hidden}});
  t.push_back({"mlp.down_proj.weight", &LayerWeights::down_proj, {hidden, inter}});
  if (c.mlp_bias) {
    t.push_back({"mlp.gate_proj.bias", &LayerWeights::gate_bias, {inter}});
    t.push_back({"mlp.up_proj.bias", &LayerWeights::up_bias, {inter}});
    t.push_back({"mlp.down_proj.bias", &LayerWeights::down_bias, {hidden}});
  }
  return t;
}

// The dense MLP's tensors, which an MoE layer has instead as its router and experts.
bool is_dense_mlp(const LayerTensor& t) {
  for (TensorView LayerWeights::*m :
       {&LayerWeights::gate_proj, &LayerWeights::up_proj, &LayerWeights::down_proj,
        &LayerWeights::gate_bias, &LayerWeights::up_bias, &LayerWeights::down_bias}) {
    if (t.member == m) return true;
  }
  return false;
}

// Where the decoder's tensors live: weight_prefix + "model." (a multimodal checkpoint in
// transformers 4's layout, as the hub publishes Gemma 3), or "model.language_model." when
// transformers 5 wrote the multimodal checkpoint (its untied head then at "lm_head.weight").
struct DecoderNames {
  std::string decoder;  // + "embed_tokens.weight", "layers.N.", "norm.weight"
  std::string lm_head;
};
DecoderNames decoder_names(const ModelConfig& c, const WeightStore* store) {
  DecoderNames n{c.weight_prefix + "model.", c.weight_prefix + "lm_head.weight"};
  constexpr std::string_view kV5 = "model.language_model.";
  if (store != nullptr && !c.weight_prefix.empty() &&
      !store->contains(n.decoder + "embed_tokens.weight") &&
      store->contains(std::string(kV5) + "embed_tokens.weight")) {
    n = {std::string(kV5), "lm_head.weight"};
  }
  return n;
}

// "model.layers.N." (or under the multimodal decoder prefix).
std::string layer_prefix(const DecoderNames& n, int64_t layer_idx) {
  return n.decoder + "layers." + std::to_string(layer_idx) + ".";
}

}  // namespace

TensorShapes llama_family_tensors(const ModelConfig& config) {
  const std::vector<int64_t> embed_shape = {config.vocab_size, config.hidden_size};
  const DecoderNames names = decoder_names(config, nullptr);
  TensorShapes shapes = {{names.decoder + "embed_tokens.weight", embed_shape}};
  const std::vector<LayerTensor> per_layer = layer_tensors(config);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const bool moe = config.moe.is_moe(l);
    for (const LayerTensor& t : per_layer) {
      if (!(moe && is_dense_mlp(t)))
        shapes.emplace_back(layer_prefix(names, l) + t.suffix, t.shape);
    }
    if (moe) append_moe_tensors(config, l, shapes);
  }
  shapes.emplace_back(names.decoder + "norm.weight", std::vector<int64_t>{config.hidden_size});
  if (!config.tie_word_embeddings) shapes.emplace_back(names.lm_head, embed_shape);
  return shapes;
}

DecoderWeights bind_llama_family(const ModelConfig& config, const WeightStore& store) {
  const std::vector<int64_t> embed_shape = {config.vocab_size, config.hidden_size};
  DecoderWeights w;
  const DecoderNames names = decoder_names(config, &store);
  w.embed = store.get_checked(names.decoder + "embed_tokens.weight", embed_shape);
  w.final_norm = store.get_checked(names.decoder + "norm.weight", {config.hidden_size});
  w.lm_head = config.tie_word_embeddings ? w.embed : store.get_checked(names.lm_head, embed_shape);
  const std::vector<LayerTensor> per_layer = layer_tensors(config);
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const bool moe = config.moe.is_moe(l);
    for (const LayerTensor& t : per_layer) {
      if (moe && is_dense_mlp(t)) continue;
      w.layers[static_cast<size_t>(l)].*t.member =
          store.get_checked(layer_prefix(names, l) + t.suffix, t.shape);
    }
    if (moe) w.layers[static_cast<size_t>(l)].moe = bind_moe_weights(config, store, l);
  }
  return w;
}

}  // namespace strata::model

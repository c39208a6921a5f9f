#include "model/gemma3_config.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace strata::model {
namespace {

using nlohmann::json;

constexpr std::string_view kCausalLm = "Gemma3ForCausalLM";
constexpr std::string_view kConditionalGeneration = "Gemma3ForConditionalGeneration";
// transformers' Gemma3TextConfig: the RoPE theta of the global and the sliding layers.
constexpr double kGlobalTheta = 1'000'000.0;
constexpr double kLocalTheta = 10'000.0;
constexpr int64_t kDefaultPattern = 6;  // five sliding layers, then a global one

std::string first_architecture(const json& config) {
  const auto a = config.find("architectures");
  if (a == config.end() || !a->is_array() || a->empty() || !(*a)[0].is_string()) return "";
  return (*a)[0].get<std::string>();
}

bool is_absent(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null();
}

// Gemma3TextConfig's defaults for the keys a config leaves out. An explicit null stays null, as
// in transformers (a null sliding_window is no window, which sliding layers then refuse).
void fill_defaults(json& text) {
  const std::pair<const char*, json> defaults[] = {
      {"vocab_size", 262'208},
      {"hidden_size", 2304},
      {"intermediate_size", 9216},
      {"num_hidden_layers", 26},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 4},
      {"head_dim", 256},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"max_position_embeddings", 131'072},
      {"rms_norm_eps", 1e-6},
      {"query_pre_attn_scalar", 256},
      {"sliding_window", 4096},
      {"tie_word_embeddings", true},
  };
  for (const auto& [key, value] : defaults) {
    if (!text.contains(key)) text[key] = value;
  }
}

// transformers' __post_init__: without layer_types, every sliding_window_pattern-th layer is
// global and the rest slide. A malformed layer count is left to the parser's checks.
void fill_layer_types(json& text, std::string_view source) {
  if (!is_absent(text, "layer_types")) return;
  const json& layers = text["num_hidden_layers"];
  int64_t pattern = kDefaultPattern;
  for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
    if (is_absent(text, key)) continue;
    if (!text[key].is_number_integer() || text[key].get<int64_t>() < 1) {
      throw Error(std::string(source) + ": '" + key + "' must be a positive integer");
    }
    pattern = text[key].get<int64_t>();
  }
  if (!layers.is_number_integer()) return;
  const auto n = layers.get<int64_t>();
  if (n < 1 || n > kMaxConfigLayers) return;
  json types = json::array();
  for (int64_t i = 0; i < n; ++i) {
    types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
  }
  text["layer_types"] = std::move(types);
}

void check_positive(const JsonFields& f, std::string_view key, double value) {
  if (!(value > 0.0) || !std::isfinite(value)) {
    f.fail(f.name(key) + " must be a positive finite number, got " + std::to_string(value));
  }
}

// The RoPE of one layer type: rope_parameters[layer_type] (transformers 5), else the 4.x keys
// (rope_theta with rope_scaling for the global layers, rope_local_base_freq for the sliding ones).
RopeConfig layer_type_rope(const JsonFields& f, std::string_view source, const char* layer_type) {
  const bool global = std::string_view(layer_type) == "full_attention";
  const double theta = global ? f.opt_number("rope_theta").value_or(kGlobalTheta)
                              : f.opt_number("rope_local_base_freq").value_or(kLocalTheta);
  if (const json* params = f.opt_object("rope_parameters")) {
    const JsonFields p(*params, source, "rope_parameters.");
    if (const json* entry = p.opt_object(layer_type)) {
      const std::string prefix = "rope_parameters." + std::string(layer_type) + ".";
      return parse_rope_params(JsonFields(*entry, source, prefix), theta);
    }
  }
  if (global) {
    if (const json* scaling = f.opt_object("rope_scaling")) {
      return parse_rope_params(JsonFields(*scaling, source, "rope_scaling."), theta);
    }
  }
  RopeConfig rope;
  rope.theta = theta;
  check_positive(f, global ? "rope_theta" : "rope_local_base_freq", theta);
  return rope;
}

}  // namespace

std::optional<Gemma3Text> gemma3_text_config(const json& config, std::string_view source) {
  const std::string arch = first_architecture(config);
  const std::string model_type =
      config.contains("model_type") && config["model_type"].is_string() ? config["model_type"] : "";
  Gemma3Text out;
  if (arch == kConditionalGeneration || (arch.empty() && model_type == "gemma3")) {
    const auto text = config.find("text_config");
    if (text == config.end() || !text->is_object()) {
      throw Error(std::string(source) + ": a " + std::string(kConditionalGeneration) +
                  " config needs a 'text_config' object (Strata serves its text model)");
    }
    out.config = *text;
    out.multimodal = true;
    // The outer object's token ids and dtype are the checkpoint's.
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
                            "tie_word_embeddings"}) {
      if (!is_absent(config, key)) out.config[key] = config[key];
    }
  } else if (arch == kCausalLm || (arch.empty() && model_type == "gemma3_text")) {
    out.config = config;
  } else {
    return std::nullopt;
  }
  out.config["architectures"] = json::array({std::string(kCausalLm)});
  fill_defaults(out.config);
  fill_layer_types(out.config, source);
  return out;
}

void parse_gemma3(const JsonFields& f, std::string_view source, ModelConfig& c) {
  if (c.architecture != Architecture::kGemma3) return;
  if (f.has("attn_logit_softcapping")) {
    f.fail(f.name("attn_logit_softcapping") +
           " is set: Strata does not soft-cap attention scores (Gemma 3 sets it null; Gemma 2 "
           "is not supported)");
  }
  if (f.has("final_logit_softcapping")) {
    c.final_logit_softcapping = f.get_number("final_logit_softcapping");
    check_positive(f, "final_logit_softcapping", c.final_logit_softcapping);
  }
  if (f.opt_bool("use_bidirectional_attention").value_or(false)) {
    f.fail(f.name("use_bidirectional_attention") +
           " is true: Strata runs causal decoders only (an embedding model's setting)");
  }
  c.norm_unit_offset = true;
  c.sandwich_norms = true;
  c.scale_embeddings = true;
  c.query_pre_attn_scalar = f.get_number("query_pre_attn_scalar");
  check_positive(f, "query_pre_attn_scalar", c.query_pre_attn_scalar);
  c.rope = layer_type_rope(f, source, "full_attention");
  c.sliding_rope = layer_type_rope(f, source, "sliding_attention");
}

}  // namespace strata::model

#pragma once
// Internal to src/model: the Gemma 3 part of config.json (transformers' Gemma3TextConfig), read
// by the config parser (hf_config.cc). Gemma3ForCausalLM keeps its keys at the top level;
// Gemma3ForConditionalGeneration (4b, 12b, 27b) under "text_config", its text model's weights
// under "language_model." in transformers 4's layout. Only the text model is served.

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/json_fields.h"

namespace strata::model {

// The object a Gemma 3 checkpoint's text model is parsed from, with transformers'
// Gemma3TextConfig defaults for the keys it leaves out (a multimodal config.json writes only the
// sizes that differ), layer_types made from sliding_window_pattern when absent, and the
// multimodal config's text_config lifted to the top level with the token ids and dtype of the
// outer object. nullopt for every other architecture. Throws strata::Error for a
// Gemma3ForConditionalGeneration config without a text_config object.
struct Gemma3Text {
  nlohmann::json config;
  bool multimodal = false;  // weights under "language_model." (ModelConfig::weight_prefix)
};
std::optional<Gemma3Text> gemma3_text_config(const nlohmann::json& config, std::string_view source);

// Fills Gemma 3's fields of c (norms, embedding scale, attention scale, the sliding layers'
// RoPE, the global layers' in c.rope, the final logits' soft-cap); leaves every other
// architecture's untouched. Throws strata::Error naming the key for what Strata does not run:
// attention-score soft-capping, bidirectional attention.
void parse_gemma3(const JsonFields& f, std::string_view source, ModelConfig& c);

// One RoPE parameter object (rope_parameters, rope_scaling, or one layer type's entry of Gemma
// 3's rope_parameters): its type and scaling keys, its "rope_theta" or else `theta`. Defined in
// hf_config.cc.
RopeConfig parse_rope_params(const JsonFields& f, double theta);

}  // namespace strata::model

#pragma once
// Internal to src/model: the mixture-of-experts part of config.json for MixtralForCausalLM and
// Qwen3MoeForCausalLM, read into ModelConfig::moe by the config parser (hf_config.cc).

#include "model/hf_config.h"
#include "model/json_fields.h"

namespace strata::model {

// Fills c.moe (and Mixtral's default RoPE theta) for a MoE architecture; clears it for any other.
// Needs c.architecture, c.num_hidden_layers and c.intermediate_size parsed. Follows
// transformers' defaults for absent keys. Throws strata::Error naming the key for a value out of
// range or a feature Strata does not run (shared experts).
void parse_moe(const JsonFields& f, ModelConfig& c);

}  // namespace strata::model

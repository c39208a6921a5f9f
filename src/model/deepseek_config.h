#pragma once
// Internal to src/model: the DeepSeek-V2 / V3 part of config.json (transformers'
// DeepseekV2Config / DeepseekV3Config), read into ModelConfig::mla and ModelConfig::moe by the
// config parser (hf_config.cc).

#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/json_fields.h"

namespace strata::model {

// Fills c.mla and c.moe for DeepseekV2ForCausalLM / DeepseekV3ForCausalLM (c.head_dim becomes
// qk_rope_head_dim, the RoPE tables' width, as transformers sets it); leaves every other
// architecture untouched. Needs the sizes and c.rope parsed. Follows transformers' defaults for
// absent keys. Throws strata::Error naming the key for a value out of range or a feature Strata
// does not run (attention or MLP biases, a scoring function or top-k method the model class does
// not have).
void parse_deepseek(const nlohmann::json& config, const JsonFields& f, ModelConfig& c);

}  // namespace strata::model

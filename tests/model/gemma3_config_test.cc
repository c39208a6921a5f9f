// Gemma 3's config.json in each form transformers writes: Gemma3ForCausalLM in the 5.x spelling
// (rope_parameters per layer type, the gemma3-hybrid fixture's), in the 4.x spelling
// (gemma-3-1b-it: rope_theta, rope_local_base_freq, sliding_window_pattern), and the text model
// of Gemma3ForConditionalGeneration (gemma-3-12b-it: a text_config holding only the sizes that
// differ from Gemma3TextConfig's defaults). Features Strata does not run are refused by name.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config_testing.h"
#include "core/error.h"
#include "model/hf_config.h"

namespace strata::model {
namespace {

using nlohmann::json;

// google/gemma-3-1b-it's config.json (Hugging Face hub), as published.
constexpr const char* kGemma3_1B = R"({
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
  "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
  "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512,
  "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
  "use_cache": true, "vocab_size": 262144})";

// google/gemma-3-12b-it's config.json, its vision_config trimmed.
constexpr const char* kGemma3_12B = R"({
  "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
  "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
  "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
  "text_config": {
    "hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text",
    "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024
  },
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
  "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})";

std::string fixture_config() {
  std::ifstream in(std::string(STRATA_TEST_DATA_DIR) + "/models/gemma3-hybrid/config.json");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using config_testing::error_of;
using config_testing::parse;
using config_testing::patched;

// Every pattern-th layer global, the rest windowed.
std::vector<int32_t> pattern_windows(int32_t layers, int32_t pattern, int32_t window) {
  std::vector<int32_t> w(static_cast<size_t>(layers));
  for (int32_t i = 0; i < layers; ++i) w[static_cast<size_t>(i)] = (i + 1) % pattern ? window : 0;
  return w;
}

void expect_gemma3_features(const ModelConfig& c) {
  EXPECT_EQ(c.architecture, Architecture::kGemma3);
  EXPECT_EQ(architecture_name(c.architecture), "Gemma3ForCausalLM");
  EXPECT_EQ(c.mlp_activation, MlpActivation::kGeluTanh);
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_TRUE(c.qk_norm && c.norm_unit_offset && c.sandwich_norms && c.scale_embeddings);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  ASSERT_TRUE(c.sliding_rope.has_value());
}

TEST(Gemma3ConfigTest, TheFixturesTransformers5Form) {
  const ModelConfig c = parse(fixture_config());
  expect_gemma3_features(c);
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.layer_sliding_window, (std::vector<int32_t>{64, 0, 64}));
  EXPECT_DOUBLE_EQ(c.query_pre_attn_scalar, 24.0);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::kLinear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.sliding_rope->type, RopeConfig::Type::kDefault);
  EXPECT_DOUBLE_EQ(c.sliding_rope->theta, 1e4);
  EXPECT_EQ(c.weight_prefix, "");
}

TEST(Gemma3ConfigTest, Gemma3_1BInTheTransformers4Form) {
  const ModelConfig c = parse(std::string(kGemma3_1B));
  expect_gemma3_features(c);
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.layer_sliding_window, pattern_windows(26, 6, 512));
  EXPECT_EQ(c.rope, (RopeConfig{.theta = 1e6}));
  EXPECT_EQ(*c.sliding_rope, (RopeConfig{.theta = 1e4}));
  EXPECT_DOUBLE_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(c.bos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(Gemma3ConfigTest, TheTextModelOfGemma3_12BTakesTransformersDefaults) {
  const ModelConfig c = parse(std::string(kGemma3_12B));
  expect_gemma3_features(c);
  EXPECT_EQ(c.weight_prefix, "language_model.");
  EXPECT_EQ(c.hidden_size, 3840);
  EXPECT_EQ(c.num_hidden_layers, 48);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  // Gemma3TextConfig's defaults for what text_config leaves out.
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c.layer_sliding_window, pattern_windows(48, 6, 1024));
  EXPECT_EQ(c.rope, (RopeConfig{.type = RopeConfig::Type::kLinear, .theta = 1e6, .factor = 8.0}));
  EXPECT_EQ(*c.sliding_rope, (RopeConfig{.theta = 1e4}));
  // The outer object's token ids and dtype.
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(Gemma3ConfigTest, ExplicitLayerTypesAndThetasWin) {
  const ModelConfig c = parse(patched(
      kGemma3_1B, {{"num_hidden_layers", 3},
                   {"layer_types", {"full_attention", "sliding_attention", "full_attention"}},
                   {"rope_theta", 5e5},
                   {"rope_local_base_freq", 2e4}}));
  EXPECT_EQ(c.layer_sliding_window, (std::vector<int32_t>{0, 512, 0}));
  EXPECT_DOUBLE_EQ(c.rope.theta, 5e5);
  EXPECT_DOUBLE_EQ(c.sliding_rope->theta, 2e4);
  // rope_parameters without a sliding entry: the sliding layers keep rope_local_base_freq.
  const ModelConfig p =
      parse(patched(fixture_config(), {{"rope_parameters", {{"sliding_attention", nullptr}}},
                                       {"rope_local_base_freq", 3e4}}));
  EXPECT_DOUBLE_EQ(p.sliding_rope->theta, 3e4);
  EXPECT_DOUBLE_EQ(p.rope.factor, 8.0);
}

TEST(Gemma3ConfigTest, FinalLogitSoftCappingIsReadWhenSet) {
  EXPECT_DOUBLE_EQ(parse(std::string(kGemma3_1B)).final_logit_softcapping, 0.0);  // null
  EXPECT_DOUBLE_EQ(
      parse(patched(kGemma3_1B, {{"final_logit_softcapping", 30.0}})).final_logit_softcapping,
      30.0);
}

TEST(Gemma3ConfigTest, WhatStrataDoesNotRunIsRefusedByName) {
  EXPECT_CONTAINS(error_of(patched(kGemma3_1B, {{"attn_logit_softcapping", 50.0}})),
                  "'attn_logit_softcapping' is set: Strata does not soft-cap attention scores");
  EXPECT_CONTAINS(error_of(patched(kGemma3_1B, {{"final_logit_softcapping", -1.0}})),
                  "'final_logit_softcapping' must be a positive finite number");
  EXPECT_CONTAINS(error_of(patched(kGemma3_1B, {{"use_bidirectional_attention", true}})),
                  "'use_bidirectional_attention' is true");
  EXPECT_CONTAINS(error_of(patched(kGemma3_1B, {{"hidden_activation", "gelu"}})),
                  "unsupported hidden_activation 'gelu'");
  EXPECT_CONTAINS(error_of(patched(kGemma3_12B, {{"text_config", nullptr}})),
                  "needs a 'text_config' object");
  EXPECT_CONTAINS(
      error_of(patched(fixture_config(),
                       {{"rope_parameters", {{"full_attention", {{"rope_type", "longrope"}}}}}})),
      "unsupported RoPE type 'longrope'");
  EXPECT_CONTAINS(error_of(patched(kGemma3_1B, {{"query_pre_attn_scalar", 0}})),
                  "'query_pre_attn_scalar' must be a positive finite number");
  EXPECT_CONTAINS(error_of(patched(kGemma3_1B, {{"sliding_window_pattern", 0}})),
                  "'sliding_window_pattern' must be a positive integer");
  // An explicit null window is no window (a merge patch's null would delete the key instead).
  json no_window = json::parse(kGemma3_1B);
  no_window["sliding_window"] = nullptr;
  EXPECT_CONTAINS(error_of(no_window), "no sliding window is in effect");
}

}  // namespace
}  // namespace strata::model

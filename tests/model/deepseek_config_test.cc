// The DeepSeek-V2 / V3 part of config.json (model/deepseek_config.h): the published
// DeepSeek-V2-Lite (transformers 4's rope_scaling, q_lora_rank null), DeepSeek-V2 and DeepSeek-V3
// configs, the fixtures' transformers 5 form, YaRN's softmax-scale correction, and one clear
// error per bad value.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "config_testing.h"
#include "core/error.h"
#include "model/hf_config.h"
#include "model/rope.h"

namespace strata::model {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

const json kV2Lite = read_json(std::string(STRATA_TEST_DATA_DIR) +
                               "/../../bench/models/deepseek-v2-lite/config.json");

// deepseek-ai/DeepSeek-V3's published config (its MoE, MLA and RoPE keys).
constexpr const char* kDeepSeekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "quantization_config": {"activation_scheme": "dynamic",
  "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
  "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
  "type": "yarn"}, "rope_theta": 10000, "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid", "tie_word_embeddings": false, "topk_group": 4,
  "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128,
  "vocab_size": 129280})";

// base with keys set (json::update: a null sets the key to null, an object replaces the key's).
json patched(const json& base, const json& keys) {
  json j = base;
  j.update(keys);
  return j;
}

using config_testing::error_of;
using config_testing::parse;

TEST(DeepseekConfigTest, DeepSeekV2LiteAsPublished) {
  const ModelConfig c = parse(kV2Lite);
  EXPECT_EQ(c.architecture, Architecture::kDeepseekV2);
  EXPECT_EQ(c.mla.q_lora_rank, 0) << "q_lora_rank null: q_proj";
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.latent_dim(), 576);
  EXPECT_EQ(c.mla.qk_head_dim(), 192);
  EXPECT_EQ(c.mla.v_head_dim, 128);
  EXPECT_TRUE(c.mla.rope_interleave);
  EXPECT_EQ(c.head_dim, 64) << "the RoPE tables' width";
  EXPECT_EQ(c.rope.type, RopeConfig::Type::kYarn);
  EXPECT_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  // 1 / sqrt(192) * (0.1 * 0.707 * ln 40 + 1)^2
  const double mscale = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.mla.softmax_scale, mscale * mscale / std::sqrt(192.0), 1e-12);
  EXPECT_DOUBLE_EQ(rope_attention_factor(c.rope), 1.0) << "mscale == mscale_all_dim";
  EXPECT_EQ(c.moe.num_experts, 64);
  EXPECT_EQ(c.moe.num_experts_per_tok, 6);
  EXPECT_EQ(c.moe.shared_intermediate_size, 2 * 1408);
  EXPECT_EQ(c.moe.scoring, MoeScoring::kSoftmax);
  EXPECT_EQ(c.moe.topk_method, MoeTopkMethod::kGreedy);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_FALSE(c.moe.is_moe(0)) << "first_k_dense_replace 1";
  EXPECT_TRUE(c.moe.is_moe(1));
  EXPECT_TRUE(c.moe.is_moe(26));
}

TEST(DeepseekConfigTest, DeepSeekV2GroupLimitedGreedy) {
  const ModelConfig c = parse(patched(kV2Lite, {{"q_lora_rank", 1536},
                                                {"n_routed_experts", 160},
                                                {"n_group", 8},
                                                {"topk_group", 3},
                                                {"topk_method", "group_limited_greedy"},
                                                {"routed_scaling_factor", 16.0}}));
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.moe.topk_method, MoeTopkMethod::kGroupLimitedGreedy);
  EXPECT_EQ(c.moe.num_groups, 8);
  EXPECT_EQ(c.moe.topk_groups, 3);
  EXPECT_EQ(c.moe.routed_scaling_factor, 16.0);
}

TEST(DeepseekConfigTest, DeepSeekV3AsPublished) {
  const ModelConfig c = parse(json::parse(kDeepSeekV3));
  EXPECT_EQ(c.architecture, Architecture::kDeepseekV3);
  EXPECT_EQ(c.quant_method, "fp8") << "parsed; Model::load refuses it";
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.moe.scoring, MoeScoring::kSigmoid);
  EXPECT_EQ(c.moe.topk_method, MoeTopkMethod::kNoAuxTc);
  EXPECT_TRUE(c.moe.score_correction_bias);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.num_groups, 8);
  EXPECT_EQ(c.moe.topk_groups, 4);
  EXPECT_EQ(c.moe.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.moe.shared_intermediate_size, 2048);
  EXPECT_FALSE(c.moe.is_moe(2));
  EXPECT_TRUE(c.moe.is_moe(3));
}

TEST(DeepseekConfigTest, TheFixturesTransformers5Form) {
  const ModelConfig v2 =
      parse(read_json(std::string(STRATA_TEST_DATA_DIR) + "/models/deepseek-v2-mla/config.json"));
  EXPECT_EQ(v2.mla.q_lora_rank, 0);
  EXPECT_EQ(v2.rope.factor, 4.0);
  EXPECT_EQ(v2.rope.original_max_position_embeddings, 256);
  const ModelConfig v3 =
      parse(read_json(std::string(STRATA_TEST_DATA_DIR) + "/models/deepseek-v3-mla/config.json"));
  EXPECT_EQ(v3.mla.q_lora_rank, 24);
  EXPECT_EQ(v3.moe.num_groups, 4);
  EXPECT_EQ(v3.moe.topk_groups, 2);
}

TEST(DeepseekConfigTest, RopeInterleaveFalseIsRotateHalf) {
  EXPECT_FALSE(
      parse(patched(json::parse(kDeepSeekV3), {{"rope_interleave", false}})).mla.rope_interleave);
}

TEST(DeepseekConfigTest, MoeLayerFreqSkipsLayers) {
  const ModelConfig c = parse(patched(kV2Lite, {{"moe_layer_freq", 2}}));
  EXPECT_FALSE(c.moe.is_moe(1));
  EXPECT_TRUE(c.moe.is_moe(2));
  EXPECT_FALSE(c.moe.is_moe(3));
}

TEST(DeepseekConfigTest, BadValuesAreErrorsNamingTheKey) {
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"topk_method", "noaux_tc"}})), "'topk_method'");
  EXPECT_CONTAINS(error_of(patched(json::parse(kDeepSeekV3), {{"topk_method", "greedy"}})),
                  "'topk_method'");
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"scoring_func", "sigmoid"}})), "'scoring_func'");
  EXPECT_CONTAINS(error_of(patched(json::parse(kDeepSeekV3), {{"n_group", 7}})), "'n_group'");
  EXPECT_CONTAINS(error_of(patched(json::parse(kDeepSeekV3), {{"topk_group", 9}})), "'topk_group'");
  EXPECT_CONTAINS(
      error_of(patched(json::parse(kDeepSeekV3), {{"topk_group", 1}, {"num_experts_per_tok", 64}})),
      "'num_experts_per_tok'");
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"kv_lora_rank", 0}})), "'kv_lora_rank'");
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"qk_rope_head_dim", 63}})), "'qk_rope_head_dim'");
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"first_k_dense_replace", 99}})),
                  "'first_k_dense_replace'");
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"routed_scaling_factor", -1.0}})),
                  "'routed_scaling_factor'");
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"attention_bias", true}})), "'attention_bias'");
  EXPECT_CONTAINS(error_of(patched(kV2Lite, {{"rope_scaling", {{"type", "yarn"}, {"factor", 4}}}})),
                  "original_max_position_embeddings");
}

}  // namespace
}  // namespace strata::model

// The mixture-of-experts part of config.json (model/moe_config.h): published Mixtral and
// Qwen3-MoE configs, transformers 4 and 5 spellings, Qwen3-MoE's dense layers, Mixtral's RoPE
// default, and one clear error per bad value.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config_testing.h"
#include "core/error.h"
#include "model/hf_config.h"

namespace strata::model {
namespace {

using nlohmann::json;

// mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B as published on the hub.
constexpr const char* kMixtral8x7B = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
  "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1e6, "router_aux_loss_coef": 0.02,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0", "use_cache": true, "vocab_size": 32000})";

constexpr const char* kQwen3_30B_A3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

using config_testing::error_of;
using config_testing::parse;
using config_testing::patched;

TEST(MoeConfigTest, Mixtral8x7B) {
  const ModelConfig c = parse(json::parse(kMixtral8x7B));
  EXPECT_EQ(c.architecture, Architecture::kMixtral);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe.moe_intermediate_size, 14336);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.layer_is_moe, std::vector<bool>(32, true));
  EXPECT_EQ(c.layer_sliding_window, std::vector<int32_t>(32, 0));
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
}

TEST(MoeConfigTest, MixtralDefaultsFollowTransformers) {
  // No rope_theta: MixtralConfig's default_theta, 1e6 (not Llama's 1e4); no expert keys: 8 and 2.
  const ModelConfig c = parse(patched(kMixtral8x7B, {{"rope_theta", nullptr},
                                                     {"num_local_experts", nullptr},
                                                     {"num_experts_per_tok", nullptr},
                                                     {"router_jitter_noise", 0.1}}));
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  const ModelConfig v5 = parse(patched(
      kMixtral8x7B, {{"rope_theta", nullptr},
                     {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e4}}}}));
  EXPECT_DOUBLE_EQ(v5.rope.theta, 1e4);
  // A window applies to every layer, as Mistral's.
  EXPECT_EQ(parse(patched(kMixtral8x7B, {{"sliding_window", 4096}})).layer_sliding_window,
            std::vector<int32_t>(32, 4096));
}

TEST(MoeConfigTest, Qwen3_30B_A3B) {
  const ModelConfig c = parse(json::parse(kQwen3_30B_A3B));
  EXPECT_EQ(c.architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 768);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.layer_is_moe, std::vector<bool>(48, true));
  // transformers 5 writes num_experts as num_local_experts (its attribute_map).
  EXPECT_EQ(parse(patched(kQwen3_30B_A3B, {{"num_experts", nullptr}, {"num_local_experts", 128}})),
            c);
}

TEST(MoeConfigTest, Qwen3MoeDenseLayersFromSparseStepAndMlpOnlyLayers) {
  const ModelConfig c = parse(
      patched(kQwen3_30B_A3B,
              {{"num_hidden_layers", 8}, {"decoder_sparse_step", 2}, {"mlp_only_layers", {3, 4}}}));
  // (l + 1) % 2 == 0: layers 1, 3, 5, 7; 3 is listed dense.
  EXPECT_EQ(c.moe.layer_is_moe,
            (std::vector<bool>{false, true, false, false, false, true, false, true}));
  EXPECT_TRUE(c.moe.any_moe_layer());
  const ModelConfig dense = parse(patched(kQwen3_30B_A3B, {{"num_experts", 0}}));
  EXPECT_FALSE(dense.moe.any_moe_layer());
  EXPECT_FALSE(parse(patched(kQwen3_30B_A3B, {{"norm_topk_prob", nullptr}})).moe.norm_topk_prob);
}

TEST(MoeConfigTest, Qwen3MoeHeadDimAndWindow) {
  // Qwen3MoeConfig has no head_dim default of its own: hidden / heads.
  EXPECT_EQ(parse(patched(kQwen3_30B_A3B, {{"head_dim", nullptr}})).head_dim, 64);
  // use_sliding_window puts the window on every layer (no max_window_layers in Qwen3-MoE).
  EXPECT_EQ(parse(patched(kQwen3_30B_A3B, {{"use_sliding_window", true}, {"sliding_window", 4096}}))
                .layer_sliding_window,
            std::vector<int32_t>(48, 4096));
}

TEST(MoeConfigTest, DenseArchitecturesHaveNoMoe) {
  json llama = json::parse(kMixtral8x7B);
  llama["architectures"] = {"MistralForCausalLM"};
  EXPECT_FALSE(parse(llama).moe.any_moe_layer());
  EXPECT_EQ(parse(llama).moe.num_experts, 0);
}

TEST(MoeConfigErrorTest, BadValuesNameTheKey) {
  EXPECT_CONTAINS(error_of(patched(kMixtral8x7B, {{"num_experts_per_tok", 0}})),
                  "'num_experts_per_tok' must be in [1, 8], got 0");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"num_experts_per_tok", 129}})),
                  "'num_experts_per_tok' must be in [1, 128], got 129");
  EXPECT_CONTAINS(error_of(patched(kMixtral8x7B, {{"num_local_experts", 0}})),
                  "'num_local_experts' must be in [1,");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"num_local_experts", 64}})),
                  "'num_local_experts' (64) and its alias 'num_experts' (128) disagree");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"decoder_sparse_step", 0}})),
                  "'decoder_sparse_step' must be in [1, 48], got 0");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"mlp_only_layers", {2, 48}}})),
                  "'mlp_only_layers' entry '48' is not a layer index in [0, 48)");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"mlp_only_layers", "all"}})),
                  "'mlp_only_layers' must be a list of layer indices");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"moe_intermediate_size", -1}})),
                  "'moe_intermediate_size' must be in [1,");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"num_experts_per_tok", "eight"}})),
                  "'num_experts_per_tok'");
  // Qwen2-MoE's shared expert is not part of Qwen3-MoE; a config that has one is refused.
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"shared_expert_intermediate_size", 5632}})),
                  "'shared_expert_intermediate_size' is 5632: shared experts (Qwen2-MoE) are not "
                  "supported");
  EXPECT_CONTAINS(error_of(patched(kQwen3_30B_A3B, {{"architectures", {"Qwen2MoeForCausalLM"}}})),
                  "unsupported architecture 'Qwen2MoeForCausalLM'");
}

TEST(MoeConfigTest, TheFixturesParse) {
  const ModelConfig mixtral =
      load_model_config(std::string(STRATA_TEST_DATA_DIR) + "/models/mixtral-moe");
  EXPECT_EQ(mixtral.moe.num_experts, 4);
  EXPECT_EQ(mixtral.head_dim, 16);  // "head_dim": null
  const ModelConfig qwen =
      load_model_config(std::string(STRATA_TEST_DATA_DIR) + "/models/qwen3-moe");
  EXPECT_EQ(qwen.moe.num_experts, 8);  // written as num_local_experts
  EXPECT_EQ(qwen.moe.moe_intermediate_size, 48);
}

}  // namespace
}  // namespace strata::model

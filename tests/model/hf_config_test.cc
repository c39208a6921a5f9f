#include "model/hf_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config_testing.h"
#include "core/error.h"
#include "model_test_files.h"

namespace strata::model {
namespace {

using nlohmann::json;

// Published config.json files (Hugging Face hub), trimmed of keys Strata does not read only where
// noted.
constexpr const char* kLlama2_7B = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float16", "transformers_version": "4.31.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

constexpr const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// The same model as transformers 5.x writes it: rope_parameters and dtype.
constexpr const char* kLlama31_8B_v5 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
  "tie_word_embeddings": false, "dtype": "bfloat16", "transformers_version": "5.0.0",
  "use_cache": true, "vocab_size": 128256})";

constexpr const char* kMistral7B_v01 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

constexpr const char* kQwen25_7B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_mrope": false,
  "use_sliding_window": false, "vocab_size": 152064})";

constexpr const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_mrope": false,
  "use_sliding_window": false, "vocab_size": 151936})";

constexpr const char* kQwen3_8B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

using config_testing::error_of;
using config_testing::parse;
using config_testing::patched;

std::vector<int32_t> all_layers(size_t n, int32_t window) {
  return std::vector<int32_t>(n, window);
}

TEST(HfConfigTest, Llama2_7B) {
  const ModelConfig c = parse(kLlama2_7B);
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(architecture_name(c.architecture), "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 11008);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm || c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.torch_dtype, "float16");
  EXPECT_EQ(c.rope, RopeConfig{});  // default RoPE, theta 10000
  EXPECT_EQ(c.layer_sliding_window, all_layers(32, 0));
}

TEST(HfConfigTest, Llama31_8B) {
  const ModelConfig c = parse(kLlama31_8B);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{128000});
  EXPECT_EQ(c.rope.type, RopeConfig::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
}

TEST(HfConfigTest, TransformersV4AndV5FormsGiveTheSameConfig) {
  EXPECT_EQ(parse(kLlama31_8B), parse(kLlama31_8B_v5));
  // Legacy "type" instead of "rope_type" (transformers < 4.43).
  const json legacy =
      patched(kLlama31_8B, {{"rope_scaling", {{"rope_type", nullptr}, {"type", "llama3"}}}});
  EXPECT_EQ(parse(legacy), parse(kLlama31_8B));
}

TEST(HfConfigTest, Mistral7B_v01) {
  const ModelConfig c = parse(kMistral7B_v01);
  EXPECT_EQ(c.architecture, Architecture::kMistral);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.layer_sliding_window, all_layers(32, 4096));
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm);
  // v0.2 and later: "sliding_window": null means full attention everywhere.
  EXPECT_EQ(parse(patched(kMistral7B_v01, {{"sliding_window", nullptr}})).layer_sliding_window,
            all_layers(32, 0));
}

TEST(HfConfigTest, Qwen25_7B) {
  const ModelConfig c = parse(kQwen25_7B);
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 28);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias || c.mlp_bias || c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151643});
  // use_sliding_window is false: the sliding_window value is ignored.
  EXPECT_EQ(c.layer_sliding_window, all_layers(28, 0));
}

TEST(HfConfigTest, Qwen25_05B) {
  const ModelConfig c = parse(kQwen25_05B);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);
}

TEST(HfConfigTest, Qwen3_8B) {
  const ModelConfig c = parse(kQwen3_8B);
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_hidden_layers, 36);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);  // written as the integer 1000000
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c.layer_sliding_window, all_layers(36, 0));
}

TEST(HfConfigTest, HeadDimDefaults) {
  // Explicit null falls back to hidden / heads (Llama, Mistral, Qwen2).
  EXPECT_EQ(parse(patched(kLlama2_7B, {{"head_dim", nullptr}})).head_dim, 128);
  EXPECT_EQ(parse(patched(kLlama2_7B, json::parse(R"({"head_dim": 64})"))).head_dim, 64);
  // Qwen3 without the key: transformers' Qwen3Config default of 128.
  EXPECT_EQ(parse(patched(kQwen3_8B, {{"head_dim", nullptr}, {"hidden_size", 2048}})).head_dim,
            128);
}

TEST(HfConfigTest, BiasFlagsFollowTheArchitecture) {
  const ModelConfig llama =
      parse(patched(kLlama2_7B, {{"attention_bias", true}, {"mlp_bias", true}}));
  EXPECT_TRUE(llama.qkv_bias && llama.o_bias && llama.mlp_bias);
  // Qwen2 always has q/k/v biases and never an o_proj bias, whatever the config says.
  const ModelConfig qwen2 = parse(patched(kQwen25_7B, {{"attention_bias", false}}));
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.o_bias);
  const ModelConfig qwen3 = parse(patched(kQwen3_8B, {{"attention_bias", true}}));
  EXPECT_TRUE(qwen3.qkv_bias && qwen3.o_bias);
  EXPECT_FALSE(qwen3.mlp_bias);
}

TEST(HfConfigTest, TokenIdsAcceptIntListOrNull) {
  const ModelConfig c = parse(patched(kLlama2_7B, json::parse(
                                                      R"({"eos_token_id": [128001, 128008, 128009],
                                                          "bos_token_id": null})")));
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_TRUE(c.bos_token_ids.empty());
}

TEST(HfConfigTest, LinearRope) {
  const ModelConfig c = parse(
      patched(kLlama2_7B, json::parse(R"({"rope_scaling": {"type": "linear", "factor": 4}})")));
  EXPECT_EQ(c.rope.type, RopeConfig::Type::kLinear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  const ModelConfig v5 = parse(patched(
      kLlama2_7B,
      json::parse(
          R"({"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}})")));
  EXPECT_EQ(v5.rope, c.rope);
}

TEST(HfConfigTest, QwenSlidingWindowAppliesFromMaxWindowLayers) {
  const json j = patched(kQwen25_05B, json::parse(R"({"use_sliding_window": true,
      "sliding_window": 4096, "max_window_layers": 21})"));
  const ModelConfig c = parse(j);
  std::vector<int32_t> expected(24, 0);
  for (size_t i = 21; i < 24; ++i) expected[i] = 4096;
  EXPECT_EQ(c.layer_sliding_window, expected);
}

TEST(HfConfigTest, LayerTypesDecidePerLayer) {
  json layer_types = json::array();
  for (int i = 0; i < 36; ++i)
    layer_types.push_back(i % 4 == 3 ? "sliding_attention" : "full_attention");
  const ModelConfig c = parse(patched(
      kQwen3_8B,
      {{"use_sliding_window", true}, {"sliding_window", 1024}, {"layer_types", layer_types}}));
  for (size_t i = 0; i < 36; ++i) {
    EXPECT_EQ(c.layer_sliding_window[i], i % 4 == 3 ? 1024 : 0) << i;
  }
  // All full_attention (what transformers 5.x writes for the published Qwen3-8B).
  const ModelConfig full =
      parse(patched(kQwen3_8B, {{"layer_types", std::vector<std::string>(36, "full_attention")}}));
  EXPECT_EQ(full, parse(kQwen3_8B));
}

TEST(HfConfigTest, LoadsFromDirectory) {
  testing::TempDir dir;
  EXPECT_THROW((void)load_model_config(dir.path()), Error);
  testing::write_file(dir / "config.json", kMistral7B_v01);
  EXPECT_EQ(load_model_config(dir.path()), parse(kMistral7B_v01));
}

TEST(HfConfigErrorTest, MissingConfigNamesTheDirectory) {
  testing::TempDir dir;
  try {
    (void)load_model_config(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "has no config.json");
    EXPECT_CONTAINS(e.what(), dir.path().string());
  }
}

TEST(HfConfigErrorTest, UnsupportedArchitectureListsSupportedOnes) {
  const std::string msg = error_of(patched(kLlama2_7B, {{"architectures", {"GPT2LMHeadModel"}}}));
  EXPECT_CONTAINS(msg, "config.json: unsupported architecture 'GPT2LMHeadModel'");
  EXPECT_CONTAINS(msg, "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM");
}

TEST(HfConfigErrorTest, ArchitectureFallsBackToModelType) {
  EXPECT_EQ(parse(patched(kQwen3_8B, {{"architectures", nullptr}})).architecture,
            Architecture::kQwen3);
  EXPECT_CONTAINS(
      error_of(patched(kLlama2_7B, {{"architectures", nullptr}, {"model_type", "gpt2"}})),
      "cannot tell the architecture");
}

TEST(HfConfigErrorTest, UnsupportedRopeTypesListSupportedOnes) {
  for (const char* type : {"dynamic", "longrope"}) {
    const std::string msg =
        error_of(patched(kLlama2_7B, {{"rope_scaling", {{"rope_type", type}, {"factor", 2.0}}}}));
    EXPECT_CONTAINS(msg, std::string("unsupported RoPE type '") + type + "'");
    EXPECT_CONTAINS(msg, "supports default, linear, llama3, yarn");
  }
  // YaRN is supported (DeepSeek), but needs its factor and original context.
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"rope_parameters", {{"rope_type", "yarn"}}}})),
                  "factor");
}

TEST(HfConfigErrorTest, IncompleteLlama3Rope) {
  EXPECT_CONTAINS(
      error_of(patched(kLlama31_8B, {{"rope_scaling", {{"low_freq_factor", nullptr}}}})),
      "missing required key 'rope_scaling.low_freq_factor'");
  EXPECT_CONTAINS(error_of(patched(kLlama31_8B, {{"rope_scaling", {{"high_freq_factor", 1.0}}}})),
                  "'rope_scaling.high_freq_factor' must be greater than low_freq_factor");
}

TEST(HfConfigErrorTest, UnsupportedActivation) {
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"hidden_act", "gelu"}})),
                  "unsupported hidden_act 'gelu'; Strata supports silu");
}

TEST(HfConfigErrorTest, WrongTypesAreErrorsNotCrashes) {
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"hidden_size", "4096"}})),
                  "'hidden_size' must be an integer, got string");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"num_key_value_heads", 4.5}})),
                  "'num_key_value_heads' must be an integer");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"architectures", "LlamaForCausalLM"}})),
                  "'architectures' must be a non-empty list of strings");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"rope_scaling", 8}})),
                  "'rope_scaling' must be an object");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"tie_word_embeddings", "yes"}})),
                  "'tie_word_embeddings' must be true or false");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"eos_token_id", "2"}})),
                  "'eos_token_id' must be an integer or a list of integers");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"eos_token_id", {1, "2"}}})),
                  "'eos_token_id' must be an integer or a list of integers");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"rms_norm_eps", "1e-5"}})),
                  "'rms_norm_eps' must be a number");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"layer_types", "full_attention"}})),
                  "'layer_types' must be a list of 32 strings");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"vocab_size", 18446744073709551615ull}})),
                  "'vocab_size' is too large");
  EXPECT_CONTAINS(error_of("[1, 2]"), "config.json: config is not a JSON object");
  EXPECT_CONTAINS(error_of("{\"hidden_size\": "), "config.json: config is not valid JSON");
  EXPECT_CONTAINS(error_of(""), "config is not valid JSON");
}

TEST(HfConfigErrorTest, InvalidValues) {
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"hidden_size", nullptr}})),
                  "missing required key 'hidden_size'");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"vocab_size", 0}})),
                  "'vocab_size' must be in [1,");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"num_hidden_layers", -2}})),
                  "'num_hidden_layers' must be in [1, 65536], got -2");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"num_key_value_heads", 5}})),
                  "num_attention_heads 32 is not a multiple of num_key_value_heads 5");
  EXPECT_CONTAINS(
      error_of(patched(kLlama2_7B, {{"num_attention_heads", 3}, {"num_key_value_heads", 3}})),
      "hidden_size 4096 is not a multiple of num_attention_heads 3");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"rms_norm_eps", 0}})),
                  "'rms_norm_eps' must be a positive finite number");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"rope_theta", -1.0}})),
                  "'rope_theta' must be a positive finite number");
  EXPECT_CONTAINS(error_of(patched(kMistral7B_v01, {{"sliding_window", 0}})),
                  "'sliding_window' must be in [1,");
  EXPECT_CONTAINS(error_of(patched(kLlama2_7B, {{"eos_token_id", -1}})), "negative token id -1");
}

TEST(HfConfigErrorTest, DeepOrLargeValuesGiveOneBoundedLine) {
  // A layer_types entry nested a million levels deep overflowed the stack when its error message
  // dumped it; the parser now refuses it before any value is built.
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_CONTAINS(error_of("{\"layer_types\": [" + deep + ", \"full_attention\"]}"),
                  "config.json: config is not valid JSON: arrays and objects nest deeper than 128");
  // Within the limit but large: the message quotes the start of the entry only.
  json types = std::vector<std::string>(36, "full_attention");
  types[0] = json::array({std::string(1 << 20, 'x')});
  const std::string msg = error_of(patched(kQwen3_8B, {{"layer_types", types}}));
  EXPECT_CONTAINS(msg, "'layer_types' entry 0 is '[\"xxx");
  EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
}

TEST(HfConfigErrorTest, LayerTypesMustMatchTheLayers) {
  EXPECT_CONTAINS(error_of(patched(kQwen3_8B, {{"layer_types", {"full_attention"}}})),
                  "'layer_types' must be a list of 36 strings");
  json types = std::vector<std::string>(36, "full_attention");
  types[5] = "chunked_attention";
  EXPECT_CONTAINS(error_of(patched(kQwen3_8B, {{"layer_types", types}})),
                  "'layer_types' entry 5 is '\"chunked_attention\"'");
  types[5] = "sliding_attention";
  EXPECT_CONTAINS(error_of(patched(kQwen3_8B, {{"layer_types", types}})),
                  "marks layer 5 as sliding_attention, but no sliding window is in effect");
}

}  // namespace
}  // namespace strata::model

// DeepSeek's MLA on the GPU runner (issue 40), what the CPU-engine comparisons of
// cuda_moe_model_test.cc (its deepseek_v2 / deepseek_v3 cases) do not cover: the shapes the GPU
// kernels do not take, the latent cache's dtype and FP8 weights are refused at start by name,
// and dummy weights of a q-LoRA model (its W_UK arranged from weights generated on the device)
// run a step. The sizes: the MLA decode kernel takes a latent of kv_lora_rank 512 + rope 64 and
// query heads in multiples of 16 (kernels/cuda/mla_decode.h), so the smallest model it runs has
// 16 heads over a 576-wide latent; the rest is kept small. Skips without a GPU.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_step_runner.h"
#include "model/cuda/cuda_model.h"
#include "model/hf_config.h"

namespace strata::model {
namespace {

std::string deepseek_v3_config(int heads, int q_lora_rank) {
  return R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "vocab_size": 256, "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
  "head_dim": 64,
  "num_attention_heads": )" +
         std::to_string(heads) + R"(, "num_key_value_heads": )" + std::to_string(heads) +
         R"(, "q_lora_rank": )" + std::to_string(q_lora_rank) + R"(,
  "kv_lora_rank": 512, "qk_nope_head_dim": 32, "qk_rope_head_dim": 64, "v_head_dim": 32,
  "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
  "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2,
  "norm_topk_prob": true, "routed_scaling_factor": 2.5, "max_position_embeddings": 1024,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";
}

CudaModelOptions dummy_options() {
  CudaModelOptions o;
  o.load_format = LoadFormat::kDummy;
  o.dummy_seed = 5;
  o.block_size = kBlockSize;
  o.num_blocks = 16;
  o.max_num_tokens = 64;
  o.max_num_seqs = 2;
  return o;
}

// CudaModel::create's refusal of config (with options o) must name `want`.
void expect_refused(const ModelConfig& config, const CudaModelOptions& o, const std::string& want) {
  try {
    const std::unique_ptr<CudaModel> accepted = CudaModel::create(config, nullptr, o);
    ADD_FAILURE() << "accepted; expected a refusal naming " << want;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(CudaMlaModelTest, RefusesHeadsTheKernelDoesNotTakeByName) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = parse_model_config_text(deepseek_v3_config(24, 96), "24 heads");
  expect_refused(config, dummy_options(), "num_attention_heads a multiple of 16 up to 128, not 24");
}

TEST(CudaMlaModelTest, RefusesAQuantizedLatentCacheAndFp8Weights) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = parse_model_config_text(deepseek_v3_config(16, 96), "v3 dummy");
  CudaModelOptions fp8_cache = dummy_options();
  fp8_cache.kv_dtype = DType::kF8E4M3;
  expect_refused(config, fp8_cache, "MLA latent cache is bfloat16 only");
  CudaModelOptions fp8_weights = dummy_options();
  fp8_weights.weight_dtype = DType::kF8E4M3;
  expect_refused(config, fp8_weights, "bfloat16 weights only");
}

// Dummy weights of a q-LoRA and a plain-q model: a prompt, then two decode steps (the
// decode-only layout), every logit finite, and the latent pool sized as the CPU engine's (one
// 576-wide bf16 row per token and layer).
TEST(CudaMlaModelTest, DummyWeightsRunPrefillAndDecodeSteps) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  for (const int q_lora_rank : {96, 0}) {
    std::string text = deepseek_v3_config(16, q_lora_rank);
    if (q_lora_rank == 0) {
      const std::string key = "\"q_lora_rank\": 0";
      text.replace(text.find(key), key.size(), "\"q_lora_rank\": null");
    }
    const ModelConfig config = parse_model_config_text(text, "v3 dummy");
    std::unique_ptr<CudaModel> gpu = CudaModel::create(config, nullptr, dummy_options());
    const kv::KvSpec& spec = gpu->kv_layout().spec();
    EXPECT_TRUE(spec.latent);
    EXPECT_EQ(spec.num_kv_heads, 1);
    EXPECT_EQ(spec.head_dim, 576);
    EXPECT_EQ(gpu->kv_layout().block_bytes(), int64_t{2} * kBlockSize * 576 * 2);
    Runner runner(*gpu);
    Seq seq{std::vector<int32_t>(42, 7)};
    std::vector<float> logits = runner.step({{&seq, 40}})[0];
    for (int i = 0; i < 2; ++i) {
      const std::vector<float> out = runner.step({{&seq, 1}})[0];
      logits.insert(logits.end(), out.begin(), out.end());
    }
    ASSERT_EQ(logits.size(), static_cast<size_t>(42 * config.vocab_size));
    for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << "q_lora_rank " << q_lora_rank;
  }
}

}  // namespace
}  // namespace strata::model

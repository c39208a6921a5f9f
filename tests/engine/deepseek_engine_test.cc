// DeepSeek-V2 / V3 (MLA, DeepSeek's MoE) in the CPU engine, beyond the fixture suite's logits
// and invariances: transformers' knock-outs reproduced through the checkpoint (top-1 routing, no
// shared experts, no router bias, unit norms) within the reference tolerance, the absorbed MLA
// decode agreeing with the whole-prompt pass, the latent pool's size, dummy weights, and
// one-line refusals (--device cuda, a quantized latent cache). Its block-scaled FP8 weights:
// fp8_checkpoint_test.cc.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine_testing.h"
#include "fixture_copy.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kReferenceTolerance = 1e-4;
constexpr int64_t kVocab = 160;
const fs::path kModels = fs::path(STRATA_TEST_DATA_DIR) / "models";

using test_util::EditedFixture;

class DeepseekEngineTest : public ::testing::Test {
 protected:
  DeepseekEngineTest() : pool_(2) {}

  // The fixture's first prompt through `dir`'s model, against knock-out `knockout`: within the
  // reference tolerance of it, and far from the unchanged model's logits.
  void expect_knockout(const std::string& fixture, const fs::path& dir,
                       const std::string& knockout) {
    const auto ref = model::SafetensorsFile::open(kModels / fixture / "reference.safetensors");
    const std::vector<int32_t> prompt = test_util::int_tensor(ref.tensor("prompt.0"));
    model::Model model = model::Model::load({dir});
    const std::vector<float> got = test_util::prompt_logits(model, pool_, {prompt})[0];
    ASSERT_EQ(got.size(), prompt.size() * kVocab);
    const auto rows = static_cast<int64_t>(prompt.size());
    const auto* want = static_cast<const float*>(ref.tensor("knockout." + knockout + ".0").data);
    const auto* full = static_cast<const float*>(ref.tensor("logits.0").data);
    EXPECT_LE(test_util::max_row_rel_err(got.data(), want, rows, kVocab), kReferenceTolerance)
        << fixture << " is not transformers' " << knockout;
    EXPECT_GE(test_util::max_row_rel_err(got.data(), full, rows, kVocab), 100 * kReferenceTolerance)
        << "the change did not reach the forward pass";
  }

  ThreadPool pool_;
};

TEST_F(DeepseekEngineTest, TopOneRoutingIsTransformersTopOne) {
  for (const std::string fixture : {"deepseek-v2-mla", "deepseek-v3-mla"}) {
    const EditedFixture m(fixture, {{"num_experts_per_tok", 1}});
    expect_knockout(fixture, m.dir(), "top1_experts");
  }
}

TEST_F(DeepseekEngineTest, NoSharedExpertsIsTransformersWithout) {
  for (const std::string fixture : {"deepseek-v2-mla", "deepseek-v3-mla"}) {
    const EditedFixture m(fixture, {{"n_shared_experts", 0}});
    expect_knockout(fixture, m.dir(), "no_shared_experts");
  }
}

TEST_F(DeepseekEngineTest, AZeroCorrectionBiasIsTransformersNoRouterBias) {
  // The bias only chooses experts (the weights stay the unbiased sigmoids): zeroing it changes
  // which experts run, and the result must be transformers' with the same bias zeroed.
  int num_biases = 0;
  const EditedFixture m("deepseek-v3-mla", json::object(),
                        [&](EditedFixture::Tensors& t, EditedFixture::RawTensors&) {
                          for (auto& [name, v] : t) {
                            if (!name.ends_with("e_score_correction_bias")) continue;
                            std::fill(v.second.begin(), v.second.end(), 0.0f);
                            ++num_biases;
                          }
                        });
  EXPECT_EQ(num_biases, 2);  // layers 1 and 2; layer 0 is dense (first_k_dense_replace 1)
  expect_knockout("deepseek-v3-mla", m.dir(), "no_router_bias");
}

TEST_F(DeepseekEngineTest, UnitNormWeightsAreTransformersUnitNorms) {
  // Every norm: input, post-attention, kv_a_layernorm, V3's q_a_layernorm, the final norm.
  for (const std::string fixture : {"deepseek-v2-mla", "deepseek-v3-mla"}) {
    int num_norms = 0;
    const EditedFixture m(fixture, json::object(),
                          [&](EditedFixture::Tensors& t, EditedFixture::RawTensors&) {
                            for (auto& [name, v] : t) {
                              if (name.find("norm") == std::string::npos || v.first.size() != 1)
                                continue;
                              std::fill(v.second.begin(), v.second.end(), 1.0f);
                              ++num_norms;
                            }
                          });
    EXPECT_EQ(num_norms, fixture == "deepseek-v3-mla" ? 3 * 4 + 1 : 3 * 3 + 1);
    expect_knockout(fixture, m.dir(), "unit_norms");
  }
}

TEST_F(DeepseekEngineTest, TheKvPoolHoldsOneLatentRowPerTokenAndLayer) {
  // kv_lora_rank 32 + qk_rope_head_dim 16 float32 channels per layer, 3 layers: 576 bytes a
  // token, against 2 x 3 x 4 heads x 48 (K) / 24 (V) channels x 4 = 3,456 expanded.
  model::Model model = model::Model::load({kModels / "deepseek-v2-mla"});
  const kv::KvSpec spec = model.kv_spec(DType::kF32);
  EXPECT_TRUE(spec.latent);
  EXPECT_EQ(spec.num_kv_heads, 1);
  EXPECT_EQ(spec.head_dim, 48);
  EXPECT_EQ(spec.bytes_per_token(), 3 * 48 * 4);
  const kv::KvLayout layout(spec, 16);
  EXPECT_EQ(layout.v_offset_bytes(1), layout.k_offset_bytes(1)) << "V is the latent itself";
}

TEST_F(DeepseekEngineTest, DummyWeightsOfADeepseekConfigGenerate) {
  for (const std::string fixture : {"deepseek-v2-mla", "deepseek-v3-mla"}) {
    EngineConfig c;
    c.model_dir = (kModels / fixture).string();
    c.dummy_weights = true;
    c.num_blocks = 32;
    auto e = Engine::create(c);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EngineRequest r;
    r.prompt = {1, 5, 9, 30, 7};
    r.params.max_tokens = 6;
    r.params.ignore_eos = true;
    const RequestId id = *(*e)->submit(r);
    const auto got = test_util::drain(**e);
    EXPECT_EQ(got.at(id).tokens.at(0).size(), 6u) << fixture;
  }
}

// The GPU MLA kernels take a latent of 576 (kv_lora_rank 512 + rope 64); the fixtures' tiny
// latent (32 + 16) is refused at start in one line naming the sizes, before any load.
TEST(DeepseekRefusalTest, TheEngineRefusesAnMlaShapeTheGpuKernelsDoNotTakeByName) {
  test_util::expect_refused_on_cuda(kModels / "deepseek-v2-mla", "DeepseekV2ForCausalLM",
                                    "kv_lora_rank 512 and qk_rope_head_dim 64 (a latent row of "
                                    "576), not 32 and 16");
  test_util::expect_refused_on_cuda(kModels / "deepseek-v3-mla", "DeepseekV3ForCausalLM",
                                    "Multi-head Latent Attention");
}

TEST(DeepseekRefusalTest, AQuantizedLatentCacheIsRefusedByName) {
  for (const KvCacheDType dtype :
       {KvCacheDType::kFp8E4M3, KvCacheDType::kInt8, KvCacheDType::kInt4}) {
    EngineConfig c;
    c.model_dir = (kModels / "deepseek-v3-mla").string();
    c.kv_cache_dtype = dtype;
    c.allow_unit_kv_scales = true;
    auto e = Engine::create(c);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("MLA latent cache"), std::string::npos)
        << e.status().message();
  }
}

}  // namespace
}  // namespace strata::engine

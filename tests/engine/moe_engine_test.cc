// Mixture-of-experts models (Mixtral, Qwen3-MoE) in the CPU engine, beyond the fixture suite's
// logits and invariances: the routing rules themselves against transformers (the fixtures'
// knock-outs of top-k and of renormalization, reproduced through config.json and matched within
// the reference tolerance), preemption by recompute and by swap, transformers 5's fused expert
// tensors giving bit for bit the logits of the per-expert layout, and clear errors for a missing
// or misshapen expert tensor.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
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
using test_util::Collected;

constexpr double kReferenceTolerance = 1e-4;
constexpr double kInvarianceTolerance = 1e-5;
const fs::path kModels = fs::path(STRATA_TEST_DATA_DIR) / "models";

using test_util::F32Tensors;

// A scratch copy of the fixture `name`.
class FixtureCopy : public test_util::FixtureCopy {
 public:
  explicit FixtureCopy(const std::string& name) : test_util::FixtureCopy(kModels / name) {}
};

class MoeEngineTest : public ::testing::Test {
 protected:
  MoeEngineTest() : pool_(2) {}

  std::vector<float> logits(const fs::path& dir, const std::vector<int32_t>& prompt) {
    model::Model model = model::Model::load({dir});
    return test_util::prompt_logits(model, pool_, {prompt})[0];
  }

  // The fixture's first prompt with the config changed by `keys`, against knock-out `knockout`.
  void expect_knockout_reproduced(const std::string& fixture, const json& keys,
                                  const std::string& knockout) {
    const auto ref = model::SafetensorsFile::open(kModels / fixture / "reference.safetensors");
    const std::vector<int32_t> prompt = test_util::int_tensor(ref.tensor("prompt.0"));
    FixtureCopy copy(fixture);
    copy.set_config(keys);
    const std::vector<float> got = logits(copy.dir(), prompt);
    ASSERT_EQ(got.size(), prompt.size() * 160u);
    const auto* want = static_cast<const float*>(ref.tensor("knockout." + knockout + ".0").data);
    const auto* full = static_cast<const float*>(ref.tensor("logits.0").data);
    const auto rows = static_cast<int64_t>(prompt.size());
    EXPECT_LE(test_util::max_row_rel_err(got.data(), want, rows, 160), kReferenceTolerance)
        << fixture << " with " << keys.dump() << " is not transformers' " << knockout;
    EXPECT_GE(test_util::max_row_rel_err(got.data(), full, rows, 160), 100 * kReferenceTolerance)
        << "the config change did not reach the forward pass";
  }

  ThreadPool pool_;
};

TEST_F(MoeEngineTest, MixtralTopOneRoutingIsTransformersTopOne) {
  expect_knockout_reproduced("mixtral-moe", {{"num_experts_per_tok", 1}}, "top1_experts");
}

TEST_F(MoeEngineTest, Qwen3MoeTopOneRoutingIsTransformersTopOne) {
  expect_knockout_reproduced("qwen3-moe", {{"num_experts_per_tok", 1}}, "top1_experts");
}

TEST_F(MoeEngineTest, Qwen3MoeWithoutRenormalizationIsTransformersWithout) {
  expect_knockout_reproduced("qwen3-moe", {{"norm_topk_prob", false}}, "no_topk_renorm");
}

// transformers 5 keeps experts fused in memory ([E, 2I, H] gate-up, [E, H, I] down, the router
// under mlp.gate for Mixtral too); a checkpoint stored that way binds views into the fused
// tensors and must compute exactly what the per-expert checkpoint computes.
TEST_F(MoeEngineTest, FusedExpertTensorsGiveTheSameLogitsAsPerExpertTensors) {
  for (const std::string fixture : {"mixtral-moe", "qwen3-moe"}) {
    const bool mixtral = fixture == "mixtral-moe";
    const std::string block = mixtral ? "block_sparse_moe." : "mlp.";
    const std::string gate = mixtral ? "w1" : "gate_proj", up = mixtral ? "w3" : "up_proj";
    const std::string down = mixtral ? "w2" : "down_proj";
    const int64_t num_experts = mixtral ? 4 : 8, inter = mixtral ? 128 : 48, hidden = 64;
    FixtureCopy copy(fixture);
    copy.rewrite_weights([&](F32Tensors& t) {
      for (int l = 0; l < 2; ++l) {
        const std::string from = "model.layers." + std::to_string(l) + "." + block;
        const std::string to = "model.layers." + std::to_string(l) + ".mlp.";
        std::vector<float> gate_up, downs;
        for (int64_t e = 0; e < num_experts; ++e) {
          const std::string ex = from + "experts." + std::to_string(e) + ".";
          for (const std::string& name : {gate, up}) {
            const auto& v = t.at(ex + name + ".weight").second;
            gate_up.insert(gate_up.end(), v.begin(), v.end());
            t.erase(ex + name + ".weight");
          }
          const auto& v = t.at(ex + down + ".weight").second;
          downs.insert(downs.end(), v.begin(), v.end());
          t.erase(ex + down + ".weight");
        }
        auto router = t.at(from + "gate.weight");
        t.erase(from + "gate.weight");
        t[to + "gate.weight"] = router;
        t[to + "experts.gate_up_proj"] = {{num_experts, 2 * inter, hidden}, gate_up};
        t[to + "experts.down_proj"] = {{num_experts, hidden, inter}, downs};
      }
    });
    const std::vector<int32_t> prompt = test_util::fixture_prompt(fixture);
    const std::vector<float> fused = logits(copy.dir(), prompt);
    const std::vector<float> per_expert = logits(kModels / fixture, prompt);
    ASSERT_EQ(fused.size(), per_expert.size());
    EXPECT_EQ(std::memcmp(fused.data(), per_expert.data(), fused.size() * sizeof(float)), 0)
        << fixture;
  }
}

TEST_F(MoeEngineTest, AMissingOrMisshapenExpertTensorIsAnErrorNamingIt) {
  {
    FixtureCopy copy("qwen3-moe");
    copy.rewrite_weights(
        [](F32Tensors& t) { t.erase("model.layers.1.mlp.experts.5.up_proj.weight"); });
    try {
      model::Model::load({copy.dir()});
      ADD_FAILURE() << "loaded without expert 5's up_proj";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.experts.5.up_proj.weight"),
                std::string::npos)
          << e.what();
    }
  }
  {
    FixtureCopy copy("mixtral-moe");
    copy.rewrite_weights([](F32Tensors& t) {
      auto& router = t.at("model.layers.0.block_sparse_moe.gate.weight");
      router.first = {2, 128};  // the same 256 floats, the wrong shape
    });
    try {
      model::Model::load({copy.dir()});
      ADD_FAILURE() << "loaded a [2, 128] router";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("model.layers.0.block_sparse_moe.gate.weight"), std::string::npos)
          << what;
      EXPECT_NE(what.find("[4, 64]"), std::string::npos) << what;
    }
  }
}

// Qwen3-MoE's dense layers (mlp_only_layers, decoder_sparse_step) bind the dense MLP's tensors
// and run it: a checkpoint without them is refused by name, and dummy weights of that shape run
// and give each prompt the same logits alone as batched.
TEST_F(MoeEngineTest, Qwen3MoeDenseLayersUseTheDenseMlp) {
  FixtureCopy copy("qwen3-moe");
  copy.set_config({{"mlp_only_layers", {1}}});
  try {
    model::Model::load({copy.dir()});
    ADD_FAILURE() << "layer 1 loaded without its dense MLP";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.gate_proj.weight"), std::string::npos)
        << e.what();
  }
  model::Model dummy = model::Model::load(
      {.model_dir = copy.dir(), .load_format = model::LoadFormat::kDummy, .dummy_seed = 3});
  EXPECT_TRUE(dummy.weights().contains("model.layers.1.mlp.down_proj.weight"));
  EXPECT_FALSE(dummy.weights().contains("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(dummy.weights().contains("model.layers.0.mlp.experts.7.down_proj.weight"));
  const std::vector<int32_t> a = test_util::prompt_of(40, 1), b = test_util::prompt_of(23, 2);
  const auto together = test_util::prompt_logits(dummy, pool_, {a, b});
  ASSERT_EQ(together.size(), 2u);
  EXPECT_EQ(together[0], test_util::prompt_logits(dummy, pool_, {a})[0]);
  EXPECT_EQ(together[1], test_util::prompt_logits(dummy, pool_, {b})[0]);
}

class MoePreemptionTest : public ::testing::TestWithParam<std::tuple<std::string, PreemptionMode>> {
};

TEST_P(MoePreemptionTest, PreemptedRequestsGetWhatTheyGetAlone) {
  ThreadPool pool(2);
  model::Model model = model::Model::load({kModels / std::get<0>(GetParam())});
  const PreemptionMode mode = std::get<1>(GetParam());
  auto made = create_engine(model, pool, test_util::preempting({}, mode));
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  std::unique_ptr<Engine> e = std::move(made).value();
  const auto [requests, ids] = test_util::submit_preempted(*e, 12);
  auto got = test_util::drain(*e);
  test_util::expect_preemption_totals(*e, mode);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    EngineConfig alone;
    alone.num_blocks = 64;
    auto made_solo = create_engine(model, pool, alone);
    ASSERT_TRUE(made_solo.ok()) << made_solo.status().to_string();
    std::unique_ptr<Engine> solo = std::move(made_solo).value();
    const RequestId id = *solo->submit(requests[i]);
    const Collected ref = test_util::drain(*solo)[id];
    EXPECT_EQ(got[ids[i]].tokens.at(0), ref.tokens.at(0)) << "request " << i;
    EXPECT_LE(test_util::max_top_logprobs_rel_err(got[ids[i]].logprobs.at(0), ref.logprobs.at(0)),
              kInvarianceTolerance)
        << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Moe, MoePreemptionTest,
    ::testing::Combine(::testing::Values("mixtral-moe", "qwen3-moe", "deepseek-v2-mla",
                                         "deepseek-v3-mla"),
                       ::testing::Values(PreemptionMode::kRecompute, PreemptionMode::kSwap)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param);
      for (char& c : name) c = c == '-' ? '_' : c;
      return name + (std::get<1>(info.param) == PreemptionMode::kSwap ? "_swap" : "_recompute");
    });

}  // namespace
}  // namespace strata::engine

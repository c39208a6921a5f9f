// MLA prefill in the expanded form (model/mla_prefill.h) in the CPU engine, forced on the
// deepseek-v2-mla and deepseek-v3-mla fixtures for every prefill chunk (the automatic rule
// expands only their whole prompts): transformers' logits within 1e-4, the absorbed form's within
// the invariance tolerance (and not bit for bit, so the expanded path did run), greedy
// continuations, batch / chunk / block-size invariance, prefix hits and preemption, and
// transformers' knock-outs reproduced through the expanded path.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine_testing.h"
#include "fixture_copy.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"

#include <nlohmann/json.hpp>

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using model::MlaPrefill;
using test_util::int_tensor;
using test_util::max_row_rel_err;

constexpr double kReferenceTolerance = 1e-4;
constexpr double kInvarianceTolerance = 1e-5;
const fs::path kModels = fs::path(STRATA_TEST_DATA_DIR) / "models";

class MlaPrefillEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  MlaPrefillEngineTest()
      : pool_(2),
        model_(model::Model::load({kModels / GetParam()})),
        reference_(model::SafetensorsFile::open(kModels / GetParam() / "reference.safetensors")) {
    model_.set_mla_prefill(MlaPrefill::kExpanded);
  }

  std::vector<int32_t> prompt(int i) const {
    return int_tensor(reference_.tensor("prompt." + std::to_string(i)));
  }
  const float* ref_logits(const std::string& name) const {
    return static_cast<const float*>(reference_.tensor(name).data);
  }
  std::vector<std::vector<float>> logits(const std::vector<std::vector<int32_t>>& prompts,
                                         const EngineConfig& config = {}) {
    return test_util::prompt_logits(model_, pool_, prompts, config);
  }

  ThreadPool pool_;
  model::Model model_;
  model::SafetensorsFile reference_;
};

TEST_P(MlaPrefillEngineTest, ExpandedLogitsMatchTransformersAndTheAbsorbedForm) {
  const int64_t vocab = model_.vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {prompt(0), prompt(1)};
  const auto expanded = logits(prompts);
  model_.set_mla_prefill(MlaPrefill::kAbsorbed);
  const auto absorbed = logits(prompts);
  ASSERT_EQ(expanded.size(), 2u);
  ASSERT_EQ(absorbed.size(), 2u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto rows = static_cast<int64_t>(prompts[i].size());
    ASSERT_EQ(expanded[i].size(), prompts[i].size() * static_cast<size_t>(vocab));
    EXPECT_LE(
        max_row_rel_err(expanded[i].data(), ref_logits("logits." + std::to_string(i)), rows, vocab),
        kReferenceTolerance)
        << "prompt " << i;
    const double forms = max_row_rel_err(expanded[i].data(), absorbed[i].data(), rows, vocab);
    char text[32];
    std::snprintf(text, sizeof(text), "%.2e", forms);
    RecordProperty("absorbed_vs_expanded_" + std::to_string(i), text);
    EXPECT_LE(forms, kInvarianceTolerance) << "prompt " << i;
    EXPECT_GT(forms, 0.0) << "the expanded form did not run: bit-identical to the absorbed one";
  }
}

TEST_P(MlaPrefillEngineTest, GreedyContinuationsMatchTransformersWithDecodesBesidePrefills) {
  // 48-token steps: the second prompt's chunks are prefilled (expanded) in the steps where the
  // first one decodes (absorbed).
  EngineConfig config;
  config.max_num_batched_tokens = 48;
  auto got = test_util::run_together(
      model_, pool_, {test_util::greedy(prompt(0), 40, -1), test_util::greedy(prompt(1), 40, -1)},
      config);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*got)[static_cast<size_t>(i)].tokens[0],
              int_tensor(reference_.tensor("greedy." + std::to_string(i))))
        << "prompt " << i;
  }
}

TEST_P(MlaPrefillEngineTest, BatchedAndChunkedRunsMatchTheSoloRun) {
  const int64_t vocab = model_.vocab_size();
  std::vector<std::vector<int32_t>> prompts = {prompt(0), prompt(1)};
  prompts.push_back({prompts[0].begin(), prompts[0].begin() + 17});
  std::vector<std::vector<float>> solo;
  for (const auto& p : prompts) solo.push_back(logits({p})[0]);
  for (int32_t block_size : {16, 32}) {
    for (int32_t chunk : {37, 256}) {
      EngineConfig config;
      config.block_size = block_size;
      config.max_num_batched_tokens = chunk;
      ThreadPool three_threads(3);
      const auto batched = test_util::prompt_logits(model_, three_threads, prompts, config);
      ASSERT_EQ(batched.size(), prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_LE(max_row_rel_err(batched[i].data(), solo[i].data(),
                                  static_cast<int64_t>(prompts[i].size()), vocab),
                  kInvarianceTolerance)
            << "block size " << block_size << ", chunk " << chunk << ", sequence " << i;
      }
    }
  }
}

TEST_P(MlaPrefillEngineTest, APrefixHitReadsTheCachedLatentThroughTheUpProjection) {
  EngineConfig config;
  config.num_blocks = 64;
  auto warm = create_engine(model_, pool_, config);
  ASSERT_TRUE(warm.ok()) << warm.status().to_string();
  const test_util::PrefixRun run = test_util::run_extended_prompt(**warm);
  EXPECT_GE((*warm)->totals().num_cached_prompt_tokens, 48);
  auto cold = create_engine(model_, pool_, config);
  ASSERT_TRUE(cold.ok());
  const RequestId id = *(*cold)->submit(run.second);
  const test_util::Collected want = test_util::drain(**cold)[id];
  EXPECT_EQ(run.got.tokens.at(0), want.tokens.at(0));
  EXPECT_LE(test_util::max_top_logprobs_rel_err(run.got.logprobs.at(0), want.logprobs.at(0)),
            kInvarianceTolerance);
  EXPECT_EQ((*warm)->last_step().num_used_blocks, 0);
}

TEST_P(MlaPrefillEngineTest, PreemptedByRecomputeRequestsGetWhatTheyGetAlone) {
  auto made = create_engine(model_, pool_, test_util::preempting({}, PreemptionMode::kRecompute));
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  std::unique_ptr<Engine> e = std::move(made).value();
  const auto [requests, ids] = test_util::submit_preempted(*e, 6);
  auto got = test_util::drain(*e);
  test_util::expect_preemption_totals(*e, PreemptionMode::kRecompute);
  for (size_t i = 0; i < ids.size(); ++i) {
    EngineConfig alone;
    alone.num_blocks = 64;
    auto solo = create_engine(model_, pool_, alone);
    ASSERT_TRUE(solo.ok());
    const RequestId id = *(*solo)->submit(requests[i]);
    const test_util::Collected ref = test_util::drain(**solo)[id];
    EXPECT_EQ(got[ids[i]].tokens.at(0), ref.tokens.at(0)) << "request " << i;
    EXPECT_LE(test_util::max_top_logprobs_rel_err(got[ids[i]].logprobs.at(0), ref.logprobs.at(0)),
              kInvarianceTolerance)
        << "request " << i;
  }
}

// Knock-outs through the expanded path: the checkpoint edited as transformers' knock-out was
// gives its logits within 1e-4, and the unchanged checkpoint's far from them.
TEST_P(MlaPrefillEngineTest, TransformersKnockoutsAreReproducedAndCaught) {
  const std::vector<int32_t> p = prompt(0);
  const auto rows = static_cast<int64_t>(p.size());
  const int64_t vocab = model_.vocab_size();
  struct Knockout {
    std::string name;
    nlohmann::json keys;
    bool unit_norms;
  };
  const std::vector<Knockout> knockouts = {{"unit_norms", nlohmann::json::object(), true},
                                           {"top1_experts", {{"num_experts_per_tok", 1}}, false}};
  for (const Knockout& k : knockouts) {
    test_util::FixtureCopy copy(kModels / GetParam());
    if (!k.keys.empty()) copy.set_config(k.keys);
    if (k.unit_norms) {
      copy.rewrite_weights([](test_util::F32Tensors& t, test_util::RawTensors&) {
        for (auto& [name, v] : t) {
          if (name.find("norm") != std::string::npos && v.first.size() == 1) {
            std::fill(v.second.begin(), v.second.end(), 1.0f);
          }
        }
      });
    }
    model::Model edited = model::Model::load({copy.dir()});
    edited.set_mla_prefill(MlaPrefill::kExpanded);
    const std::vector<float> got = test_util::prompt_logits(edited, pool_, {p})[0];
    ASSERT_EQ(got.size(), p.size() * static_cast<size_t>(vocab)) << k.name;
    const float* want = ref_logits("knockout." + k.name + ".0");
    EXPECT_LE(max_row_rel_err(got.data(), want, rows, vocab), kReferenceTolerance) << k.name;
    EXPECT_GE(max_row_rel_err(got.data(), ref_logits("logits.0"), rows, vocab),
              100 * kReferenceTolerance)
        << k.name << " did not reach the forward pass";
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, MlaPrefillEngineTest,
                         ::testing::Values("deepseek-v2-mla", "deepseek-v3-mla"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace strata::engine

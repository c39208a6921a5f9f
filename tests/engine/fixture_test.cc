// The CPU engine against Hugging Face transformers: logits at every position of every fixture
// prompt within 1e-4 (relative L2 per position) of transformers' float64 reference, greedy
// continuations of 40 tokens identical, and the batch / chunking / block-size / thread-count
// invariance docs/architecture.md asks of the CPU backend (1e-5). Fixtures come from tools/fixtures/make_fixtures.py.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/sequence.h"
#include "engine_testing.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

using test_util::int_tensor;
using test_util::max_row_rel_err;

constexpr double kReferenceTolerance = 1e-4;   // vs transformers, float64
constexpr double kInvarianceTolerance = 1e-5;  // same request, other batch / chunking / threads
constexpr double kKnockoutFactor = 100.0;

const std::string kModelsDir = std::string(STRATA_TEST_DATA_DIR) + "/models/";

const std::vector<std::string> kFixtures = {
    "llama2-mha",    "llama-mqa-bias",  "llama3-gqa",       "llama3-gqa-bf16", "mistral-swa",
    "qwen2-tied",    "qwen3-qknorm",    "qwen3-qknorm-f16", "mixtral-moe",     "qwen3-moe",
    "gemma3-hybrid", "deepseek-v2-mla", "deepseek-v3-mla",  "qwen2-yarn",
};

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  FixtureTest()
      : pool_(2),
        model_(model::Model::load({kModelsDir + GetParam()})),
        reference_(model::SafetensorsFile::open(kModelsDir + GetParam() + "/reference.safetensors")) {}

  int num_prompts() const { return reference_.contains("prompt.1") ? 2 : 1; }
  std::vector<int32_t> prompt(int i) const {
    return int_tensor(reference_.tensor("prompt." + std::to_string(i)));
  }
  const float* ref_logits(int i) const {
    return static_cast<const float*>(reference_.tensor("logits." + std::to_string(i)).data);
  }

  // Every position's logits of each prompt, all in one engine (no block leaked).
  std::vector<std::vector<float>> logits(const std::vector<std::vector<int32_t>>& prompts,
                                         const EngineConfig& config, ThreadPool& pool) {
    return test_util::prompt_logits(model_, pool, prompts, config);
  }

  ThreadPool pool_;
  model::Model model_;
  model::SafetensorsFile reference_;
};

TEST_P(FixtureTest, LogitsMatchTransformersAtEveryPosition) {
  const int64_t vocab = model_.vocab_size();
  for (int i = 0; i < num_prompts(); ++i) {
    const std::vector<int32_t> p = prompt(i);
    ASSERT_GE(p.size(), 300u);
    const auto got = logits({p}, EngineConfig{}, pool_);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].size(), p.size() * static_cast<size_t>(vocab));
    EXPECT_LE(max_row_rel_err(got[0].data(), ref_logits(i), static_cast<int64_t>(p.size()), vocab),
              kReferenceTolerance)
        << "prompt " << i;
  }
}

TEST_P(FixtureTest, GreedyContinuationMatchesTransformers) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < num_prompts(); ++i) requests.push_back(test_util::greedy(prompt(i), 40, -1));
  auto got = test_util::run_together(model_, pool_, requests);  // in one batch, no leak
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (int i = 0; i < num_prompts(); ++i) {
    EXPECT_EQ((*got)[static_cast<size_t>(i)].tokens[0],
              int_tensor(reference_.tensor("greedy." + std::to_string(i))))
        << "prompt " << i;
  }
}

TEST_P(FixtureTest, EveryKnockoutDiffersFromReferenceByFarMoreThanTolerance) {
  const int64_t vocab = model_.vocab_size();
  const auto len = static_cast<int64_t>(prompt(0).size());
  for (const auto& t : reference_.tensors()) {
    if (t.name.rfind("knockout.", 0) != 0) continue;
    const auto* ko = static_cast<const float*>(reference_.tensor(t.name).data);
    EXPECT_GE(max_row_rel_err(ko, ref_logits(0), len, vocab), kKnockoutFactor * kReferenceTolerance)
        << t.name << " is too close to the reference to prove anything";
  }
}

TEST_P(FixtureTest, BatchedChunkedAndThreadedRunsMatchSoloRun) {
  const int64_t vocab = model_.vocab_size();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < num_prompts(); ++i) prompts.push_back(prompt(i));
  prompts.push_back({prompts[0].begin(), prompts[0].begin() + 17});  // a short third sequence
  std::vector<std::vector<float>> solo;
  ThreadPool one_thread(1);
  for (const auto& p : prompts) solo.push_back(logits({p}, EngineConfig{}, one_thread)[0]);
  for (int32_t block_size : kSupportedBlockSizes) {
    for (int32_t chunk : {37, 256}) {
      EngineConfig config;
      config.block_size = block_size;
      config.max_num_batched_tokens = chunk;
      ThreadPool three_threads(3);
      const auto batched = logits(prompts, config, three_threads);
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

INSTANTIATE_TEST_SUITE_P(Transformers, FixtureTest, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace strata::engine

// The step loop's contract beyond logits, through strata::Engine: sampling reproducibility,
// stop rules, logprobs and prompt logprobs, request validation, and that every block goes back
// to the pool.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine/sequence.h"
#include "engine_testing.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

const std::string kModel = std::string(STRATA_TEST_DATA_DIR) + "/models/qwen2-tied";

std::vector<int32_t> make_prompt(int32_t n, int32_t seed) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back((i * 37 + seed * 11 + 5) % 150);
  return p;
}

// What one request returned, gathered from the engine's step outputs.
struct Result1 {
  std::vector<int32_t> output_ids;
  std::vector<TokenLogprobs> output_logprobs;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  FinishReason finish_reason = FinishReason::kLength;
};

class StepContractTest : public ::testing::Test {
 protected:
  StepContractTest() : pool_(2), model_(model::Model::load({kModel})) {}

  // Submits the requests together to an engine sized for them and steps it until they finish:
  // the first refused request's status, or each request's result.
  Result<std::vector<Result1>> run(const std::vector<EngineRequest>& requests,
                                   EngineConfig config = {}) {
    auto got = test_util::run_together(model_, pool_, requests, config);
    if (!got.ok()) return got.status();
    std::vector<Result1> out;
    for (test_util::Collected& c : *got) {
      out.push_back({c.tokens[0], c.logprobs[0], c.prompt_logprobs, c.finish[0]});
    }
    return out;
  }

  // Raw logits at every prompt position, for checking logprobs independently of the sampler.
  std::vector<float> logits_of(const std::vector<int32_t>& prompt) {
    return test_util::prompt_logits(model_, pool_, {prompt})[0];
  }

  static double log_softmax(const float* row, int64_t vocab, int32_t token) {
    double max = row[0];
    for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, row[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    return row[token] - max - std::log(sum);
  }

  ThreadPool pool_;
  model::Model model_;
};

EngineRequest request(std::vector<int32_t> prompt) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  return r;
}

EngineRequest sampled_request(std::vector<int32_t> prompt, uint64_t seed) {
  EngineRequest r = request(std::move(prompt));
  r.params.temperature = 0.9f;
  r.params.top_p = 0.95f;
  r.params.top_k = 50;
  r.params.seed = seed;
  r.params.max_tokens = 24;
  r.params.ignore_eos = true;
  return r;
}

TEST_F(StepContractTest, SameSeedGivesSameTokensAloneOrInAnyBatch) {
  const EngineRequest a = sampled_request(make_prompt(40, 1), 1234);
  const EngineRequest b = sampled_request(make_prompt(23, 2), 99);
  auto alone = run({a});
  ASSERT_TRUE(alone.ok());
  EngineConfig chunked;
  chunked.max_num_batched_tokens = 7;
  chunked.block_size = 8;
  auto batched = run({b, a, b}, chunked);
  ASSERT_TRUE(batched.ok());
  EXPECT_EQ((*alone)[0].output_ids, (*batched)[1].output_ids);
  EXPECT_EQ((*batched)[0].output_ids, (*batched)[2].output_ids);
  auto other_seed = run({sampled_request(make_prompt(40, 1), 1235)});
  ASSERT_TRUE(other_seed.ok());
  EXPECT_NE((*alone)[0].output_ids, (*other_seed)[0].output_ids);
}

TEST_F(StepContractTest, StopTokenEndsTheSequenceAndIsReturned) {
  EngineRequest r = request(make_prompt(30, 3));
  r.params.temperature = 0.0f;
  r.params.max_tokens = 20;
  r.params.ignore_eos = true;
  auto free_run = run({r});
  ASSERT_TRUE(free_run.ok());
  ASSERT_EQ((*free_run)[0].output_ids.size(), 20u);
  EXPECT_EQ((*free_run)[0].finish_reason, FinishReason::kLength);
  const int32_t stop = (*free_run)[0].output_ids[5];
  r.params.stop_token_ids = {stop};
  auto stopped = run({r});
  ASSERT_TRUE(stopped.ok());
  const auto& ids = (*stopped)[0].output_ids;
  const auto first = std::find(ids.begin(), ids.end(), stop);
  ASSERT_NE(first, ids.end());
  EXPECT_EQ(first + 1, ids.end()) << "generation went on past the stop token";
  EXPECT_EQ((*stopped)[0].finish_reason, FinishReason::kStop);
}

TEST_F(StepContractTest, EosStopsUnlessIgnored) {
  EngineRequest r = request(make_prompt(30, 4));
  r.params.temperature = 0.0f;
  r.params.max_tokens = 10;
  auto free_run = run({r});
  ASSERT_TRUE(free_run.ok());
  EngineConfig with_eos;
  with_eos.eos_token_ids = {(*free_run)[0].output_ids[2]};
  auto stopped = run({r}, with_eos);
  ASSERT_TRUE(stopped.ok());
  EXPECT_LE((*stopped)[0].output_ids.size(), 3u);
  EXPECT_EQ((*stopped)[0].finish_reason, FinishReason::kStop);
  r.params.ignore_eos = true;
  auto ignored = run({r}, with_eos);
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ((*ignored)[0].output_ids, (*free_run)[0].output_ids);
}

TEST_F(StepContractTest, LogprobsAreRawLogSoftmaxOfTheModelsLogits) {
  EngineRequest r = request(make_prompt(25, 5));
  r.params.temperature = 0.0f;
  r.params.max_tokens = 4;
  r.params.logprobs = 3;
  r.params.prompt_logprobs = 2;
  auto out = run({r});
  ASSERT_TRUE(out.ok());
  const Result1& g = (*out)[0];
  const int64_t vocab = model_.vocab_size();
  // Prompt logprobs: the first is null, token i is scored by the logits at position i - 1.
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), g.output_ids.begin(), g.output_ids.end() - 1);
  const std::vector<float> logits = logits_of(all);
  ASSERT_EQ(g.prompt_logprobs.size(), r.prompt.size());
  EXPECT_FALSE(g.prompt_logprobs[0].has_value());
  for (size_t i = 1; i < r.prompt.size(); ++i) {
    ASSERT_TRUE(g.prompt_logprobs[i].has_value());
    EXPECT_NEAR(g.prompt_logprobs[i]->logprob,
                log_softmax(&logits[(i - 1) * vocab], vocab, r.prompt[i]), 1e-5);
    EXPECT_EQ(g.prompt_logprobs[i]->top_logprobs.size(), 2u);
  }
  ASSERT_EQ(g.output_logprobs.size(), g.output_ids.size());
  for (size_t j = 0; j < g.output_ids.size(); ++j) {
    const size_t row = r.prompt.size() - 1 + j;
    EXPECT_EQ(g.output_logprobs[j].token, g.output_ids[j]);
    EXPECT_NEAR(g.output_logprobs[j].logprob, log_softmax(&logits[row * vocab], vocab, g.output_ids[j]),
                1e-5);
    ASSERT_EQ(g.output_logprobs[j].top_logprobs.size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(g.output_logprobs[j].top_logprobs[0].first, g.output_ids[j]);
  }
}

TEST_F(StepContractTest, BadRequestsAreRejectedWithoutRunning) {
  EngineRequest empty = request({});
  EXPECT_EQ(run({empty}).status().code(), StatusCode::kInvalidArgument);
  EngineRequest out_of_vocab = request({1, 2, 100000});
  EXPECT_EQ(run({out_of_vocab}).status().code(), StatusCode::kInvalidArgument);
  EngineRequest too_long = request(make_prompt(1000, 6));
  too_long.params.max_tokens = 100;  // 1100 > max_position_embeddings 1024
  EXPECT_EQ(run({too_long}).status().code(), StatusCode::kInvalidArgument);
  EngineRequest bad_params = request(make_prompt(5, 6));
  bad_params.params.top_p = 0.0f;
  EXPECT_EQ(run({bad_params}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StepContractTest, RejectsUnsupportedSettings) {
  EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 24;
  EXPECT_EQ(engine::create_engine(model_, pool_, c).status().code(), StatusCode::kInvalidArgument);
  c.block_size = 16;
  c.max_num_batched_tokens = 0;
  EXPECT_EQ(engine::create_engine(model_, pool_, c).status().code(), StatusCode::kInvalidArgument);
  for (int32_t b : kSupportedBlockSizes) {
    c = EngineConfig{};
    c.num_blocks = 64;
    c.block_size = b;
    EXPECT_TRUE(engine::create_engine(model_, pool_, c).ok()) << "block size " << b;
  }
}

}  // namespace
}  // namespace strata::engine

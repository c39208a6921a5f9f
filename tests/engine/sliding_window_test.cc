// Sliding-window models in the step loop (the mistral-swa fixture: every layer has a 64-token
// window): blocks wholly outside a sequence's window go back to the pool every step, so a
// sequence ten windows long runs in a pool of ceil(64 / block_size) + 2 blocks, and what it
// generates does not depend on the pool's size -- in a pool that small the freed blocks are
// reallocated and overwritten at once, so reading one would change the tokens and logprobs.
// (The fixture test checks the same model against transformers over 300+ positions.)

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/generator.h"
#include "kv/kv_accounting.h"
#include "model/model.h"

namespace strata::engine {
namespace {

const std::string kModel = std::string(STRATA_TEST_DATA_DIR) + "/models/mistral-swa";
constexpr int32_t kWindow = 64;

GenerationRequest long_request() {
  GenerationRequest r;
  for (int32_t i = 0; i < 40; ++i) r.prompt.push_back((i * 29 + 3) % 150);
  r.params.temperature = 0.0f;
  r.params.max_tokens = 10 * kWindow;
  r.params.ignore_eos = true;
  r.params.logprobs = 5;
  return r;
}

class SlidingWindowEngineTest : public ::testing::TestWithParam<int32_t> {
 protected:
  SlidingWindowEngineTest() : pool_(2), model_(model::Model::load({kModel})) {}

  ThreadPool pool_;
  model::Model model_;
};

TEST_P(SlidingWindowEngineTest, ATenWindowSequenceHoldsOnlyItsWindowAndMatchesALargePool) {
  const int32_t bs = GetParam();
  ASSERT_EQ(kv::pool_sliding_window(model_.config().layer_sliding_window), kWindow);
  const int64_t decode_bound = kv::blocks_held_per_sequence(10 * kWindow, kWindow, bs);
  EXPECT_EQ(decode_bound, (kWindow + bs - 1) / bs + 1);

  GeneratorConfig tight;
  tight.block_size = bs;
  tight.max_num_batched_tokens = bs;  // prefill chunks of one block: window + 1 block in flight
  tight.num_blocks = static_cast<int32_t>(decode_bound) + 2;  // + the chunk's block + null
  tight.enable_prefix_caching = false;
  Generator small(model_, pool_, tight);
  auto a = small.generate(std::vector<GenerationRequest>{long_request()});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_LE(small.stats().peak_used_blocks, decode_bound + 1);
  EXPECT_EQ(small.num_used_blocks(), 0) << "blocks leaked";

  GeneratorConfig roomy = tight;
  roomy.num_blocks = 1 + (40 + 10 * kWindow) / bs + 1;  // never reuses a block
  Generator large(model_, pool_, roomy);
  auto b = large.generate(std::vector<GenerationRequest>{long_request()});
  ASSERT_TRUE(b.ok());
  const GenerationResult& x = (*a)[0];
  const GenerationResult& y = (*b)[0];
  ASSERT_EQ(x.output_ids, y.output_ids);
  for (size_t i = 0; i < x.output_logprobs.size(); ++i) {
    EXPECT_EQ(x.output_logprobs[i].logprob, y.output_logprobs[i].logprob) << "token " << i;
  }
}

TEST_P(SlidingWindowEngineTest, AnAutoSizedPoolIsWindowCapped) {
  GeneratorConfig config;
  config.block_size = GetParam();
  config.max_num_batched_tokens = 128;
  Generator g(model_, pool_, config);
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{long_request()}).ok());
  // Window + one chunk, rounded up to blocks, + the straddled block + the null block.
  EXPECT_EQ(g.stats().num_blocks, (kWindow + 128 + GetParam() - 1) / GetParam() + 2);
  EXPECT_EQ(g.num_used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, SlidingWindowEngineTest, ::testing::Values(8, 16, 32));

}  // namespace
}  // namespace strata::engine

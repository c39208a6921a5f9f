// Sliding-window models in the step loop (the mistral-swa fixture: every layer has a 64-token
// window): blocks wholly outside a sequence's window go back to the pool every step, so a
// sequence ten windows long runs in a pool of ceil(64 / block_size) + 2 blocks, and what it
// generates does not depend on the pool's size -- in a pool that small the freed blocks are
// reallocated and overwritten at once, so reading one would change the tokens and logprobs.
// (The fixture test checks the same model against transformers over 300+ positions.)

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

const std::string kModel = std::string(STRATA_TEST_DATA_DIR) + "/models/mistral-swa";
constexpr int32_t kWindow = 64;

EngineRequest long_request() {
  EngineRequest r;
  for (int32_t i = 0; i < 40; ++i) r.prompt.push_back((i * 29 + 3) % 150);
  r.params.temperature = 0.0f;
  r.params.max_tokens = 10 * kWindow;
  r.params.ignore_eos = true;
  r.params.logprobs = 5;
  return r;
}

// What a run of long_request() in an engine of config returned, and the most blocks in use
// after any step.
struct WindowRun {
  test_util::Collected got;
  int32_t peak_used_blocks = 0;
  int32_t num_blocks = 0;
  int32_t num_used_blocks_after = -1;
};

class SlidingWindowEngineTest : public ::testing::TestWithParam<int32_t> {
 protected:
  SlidingWindowEngineTest() : pool_(2), model_(model::Model::load({kModel})) {}

  WindowRun run(EngineConfig config) {
    config.watermark = 0.0;  // a pool this small would keep a 1-block watermark
    WindowRun out;
    auto e = engine::create_engine(model_, pool_, config);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!e.ok()) return out;
    auto id = (*e)->submit(long_request());
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (!id.ok()) return out;
    while ((*e)->has_unfinished()) {
      auto step = (*e)->step();
      EXPECT_TRUE(step.ok()) << step.status().to_string();
      if (!step.ok()) break;
      out.peak_used_blocks = std::max(out.peak_used_blocks, (*e)->last_step().num_used_blocks);
      for (const RequestOutput& o : *step) test_util::absorb(out.got, o);
    }
    out.num_blocks = (*e)->kv_cache().num_blocks;
    out.num_used_blocks_after = (*e)->last_step().num_used_blocks;
    return out;
  }

  ThreadPool pool_;
  model::Model model_;
};

TEST_P(SlidingWindowEngineTest, ATenWindowSequenceHoldsOnlyItsWindowAndMatchesALargePool) {
  const int32_t bs = GetParam();
  ASSERT_EQ(kv::pool_sliding_window(model_.config().layer_sliding_window), kWindow);
  const int64_t decode_bound = kv::blocks_held_per_sequence(10 * kWindow, kWindow, bs);
  EXPECT_EQ(decode_bound, (kWindow + bs - 1) / bs + 1);

  EngineConfig tight;
  tight.block_size = bs;
  tight.max_num_batched_tokens = bs;  // prefill chunks of one block: window + 1 block in flight
  tight.num_blocks = static_cast<int32_t>(decode_bound) + 2;  // + the chunk's block + null
  tight.enable_prefix_caching = false;
  const WindowRun a = run(tight);
  ASSERT_TRUE(a.got.finished);
  EXPECT_LE(a.peak_used_blocks, decode_bound + 1);
  EXPECT_EQ(a.num_used_blocks_after, 0) << "blocks leaked";

  EngineConfig roomy = tight;
  roomy.num_blocks = 1 + (40 + 10 * kWindow) / bs + 1;  // never reuses a block
  const WindowRun b = run(roomy);
  ASSERT_TRUE(b.got.finished);
  const std::vector<TokenLogprobs>& x = a.got.logprobs.at(0);
  const std::vector<TokenLogprobs>& y = b.got.logprobs.at(0);
  ASSERT_EQ(a.got.tokens.at(0), b.got.tokens.at(0));
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].logprob, y[i].logprob) << "token " << i;
  }
}

TEST_P(SlidingWindowEngineTest, AWindowCappedPoolRunsTheRequest) {
  EngineConfig config;
  config.block_size = GetParam();
  config.max_num_batched_tokens = 128;
  const WindowRun r = run(test_util::sized_for(config, {long_request()}, kWindow));
  ASSERT_TRUE(r.got.finished);
  // Window + one chunk, rounded up to blocks, + the straddled block + the null block.
  EXPECT_EQ(r.num_blocks, (kWindow + 128 + GetParam() - 1) / GetParam() + 2);
  EXPECT_EQ(r.num_used_blocks_after, 0);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, SlidingWindowEngineTest, ::testing::Values(8, 16, 32));

}  // namespace
}  // namespace strata::engine

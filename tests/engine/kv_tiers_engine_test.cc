// KV tiers under the CPU engine's pool (docs/kv.md, "KV tiers"), on a transformers fixture: a
// pool that holds one request's blocks loses a prompt's prefix to the next prompt, and the prompt
// asked again gets its prefix back from host memory, from disk, and from disk after a restart --
// returning what a cold run returns (the same greedy tokens, top-20 logprobs within the CPU
// invariance tolerance, 1e-5). A corrupt disk block is recomputed, with the same output; another
// model over the same directory finds nothing; nothing leaks.

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

constexpr double kInvarianceTolerance = 1e-5;
const std::string kModelsDir = std::string(STRATA_TEST_DATA_DIR) + "/models/";

struct Returned {
  std::vector<int32_t> output_ids;
  std::vector<TokenLogprobs> output_logprobs;
  RequestMetrics metrics;  // as the last output reported them
};

Returned run(Engine& e, const EngineRequest& r) {
  auto id = e.submit(r);
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  test_util::Collected got;
  RequestMetrics metrics;
  while (e.has_unfinished()) {
    auto step = e.step();
    EXPECT_TRUE(step.ok()) << step.status().to_string();
    if (!step.ok()) break;
    for (const RequestOutput& o : *step) {
      test_util::absorb(got, o);
      metrics = o.metrics;
    }
  }
  if (got.tokens.empty()) return {};
  return {got.tokens[0], got.logprobs[0], metrics};
}

class KvTiersEngineTest : public ::testing::Test {
 protected:
  static constexpr const char* kModel = "llama3-gqa";

  KvTiersEngineTest()
      : pool_(2),
        model_(model::Model::load({kModelsDir + kModel})),
        dir_(std::filesystem::temp_directory_path() /
             ("strata_kv_tiers_engine_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    a_ = test_util::greedy(test_util::fixture_prompt(kModel), 12, 20);
    // Another prompt as long, sharing nothing: running it takes every block of the pool.
    std::vector<int32_t> other(a_.prompt.size());
    for (size_t i = 0; i < other.size(); ++i) other[i] = static_cast<int32_t>((i * 37 + 11) % 150);
    b_ = test_util::greedy(std::move(other), 12, 20);
  }
  ~KvTiersEngineTest() override { std::filesystem::remove_all(dir_); }

  // A pool that holds one of the two requests, with the tiers of host_blocks blocks (and a disk
  // tier when with_disk).
  std::unique_ptr<Engine> make(int32_t host_blocks, bool with_disk,
                               const std::string& model_dir = "",
                               const std::function<void(EngineConfig&)>& more = {}) {
    EngineConfig c = test_util::sized_for(EngineConfig{}, {a_}, 0);
    c.model_dir = model_dir.empty() ? kModelsDir + kModel : model_dir;
    const int64_t block_bytes =
        static_cast<int64_t>(model_.kv_spec(DType::kF32).block_bytes(c.block_size));
    c.kv_offload_bytes = host_blocks * block_bytes;
    if (with_disk) {
      c.kv_disk_path = dir_.string();
      c.kv_disk_bytes = int64_t{1} << 30;
    }
    if (more) more(c);
    auto e = engine::create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  Returned cold() {
    EngineConfig c = test_util::sized_for(EngineConfig{}, {a_}, 0);
    c.enable_prefix_caching = false;
    auto e = engine::create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok());
    return run(**e, a_);
  }

  // Runs a, then b (which evicts a's blocks from the pool), then a again: what the second a
  // returned.
  Returned a_after_eviction(Engine& e) {
    run(e, a_);
    run(e, b_);
    return run(e, a_);
  }

  void expect_same(const Returned& got, const Returned& want) {
    EXPECT_EQ(got.output_ids, want.output_ids);
    EXPECT_LT(test_util::max_top_logprobs_rel_err(got.output_logprobs, want.output_logprobs),
              kInvarianceTolerance);
  }

  int32_t full_blocks() const { return static_cast<int32_t>((a_.prompt.size() - 1) / 16); }

  ThreadPool pool_;
  model::Model model_;
  std::filesystem::path dir_;
  EngineRequest a_, b_;
};

TEST_F(KvTiersEngineTest, APrefixEvictedFromThePoolComesBackFromHostMemory) {
  const Returned want = cold();
  auto e = make(/*host_blocks=*/256, /*with_disk=*/false);
  ASSERT_NE(e, nullptr);
  const Returned got = a_after_eviction(*e);
  expect_same(got, want);
  const EngineTotals t = e->totals();
  EXPECT_GE(t.kv_offloaded_blocks, full_blocks());
  EXPECT_EQ(t.kv_host_tier_hit_tokens, int64_t{full_blocks()} * 16);
  EXPECT_EQ(t.kv_disk_tier_hit_tokens, 0);
  EXPECT_EQ(got.metrics.num_host_tier_tokens, full_blocks() * 16) << "the request's own usage";
  EXPECT_EQ(got.metrics.num_disk_tier_tokens, 0);
  EXPECT_EQ(got.metrics.num_cached_tokens, full_blocks() * 16);
  EXPECT_EQ(e->last_step().num_free_blocks, e->kv_cache().num_blocks - 1) << "no leaked block";
}

TEST_F(KvTiersEngineTest, FromDiskAndFromDiskAfterARestart) {
  const Returned want = cold();
  {
    auto e = make(/*host_blocks=*/2, /*with_disk=*/true);
    ASSERT_NE(e, nullptr);
    expect_same(a_after_eviction(*e), want);
    const EngineTotals t = e->totals();
    EXPECT_GT(t.kv_disk_written_blocks, 0);
    EXPECT_GT(t.kv_disk_tier_hit_tokens, 0);
    EXPECT_EQ(t.kv_host_tier_hit_tokens + t.kv_disk_tier_hit_tokens, int64_t{full_blocks()} * 16);
    run(*e, b_);  // a's blocks go down again
  }
  // A new engine over the same directory: a's first request already hits on disk.
  auto e = make(/*host_blocks=*/2, /*with_disk=*/true);
  ASSERT_NE(e, nullptr);
  const Returned restarted = run(*e, a_);
  expect_same(restarted, want);
  EXPECT_GT(e->totals().kv_disk_tier_hit_tokens, 0);
  EXPECT_EQ(restarted.metrics.num_disk_tier_tokens, e->totals().kv_disk_tier_hit_tokens);
  EXPECT_EQ(e->totals().kv_tier_faults, 0);
}

TEST_F(KvTiersEngineTest, WriteThroughServesTheSameWithoutCopyingOnEviction) {
  const Returned want = cold();
  auto e = make(/*host_blocks=*/256, /*with_disk=*/false, "",
                [](EngineConfig& c) { c.kv_offload_write_through = true; });
  ASSERT_NE(e, nullptr);
  run(*e, a_);
  const int64_t after_a = e->totals().kv_offloaded_blocks;
  EXPECT_GE(after_a, full_blocks()) << "a's blocks went down as they were cached";
  run(*e, b_);
  const Returned got = run(*e, a_);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_host_tier_tokens, full_blocks() * 16);
  EXPECT_EQ(e->last_step().num_free_blocks, e->kv_cache().num_blocks - 1) << "no leaked block";
}

// The blocks a request's last step cached are copied down by one more step while the engine is
// idle (has_unfinished() says so), not at the start of the next request.
TEST_F(KvTiersEngineTest, WriteThroughCopiesTheLastStepsBlocksWhileIdle) {
  auto e = make(/*host_blocks=*/256, /*with_disk=*/false, "",
                [](EngineConfig& c) { c.kv_offload_write_through = true; });
  ASSERT_NE(e, nullptr);
  EngineRequest one_token = a_;
  one_token.params.max_tokens = 1;  // its prefill is its last step: every full block cached then
  ASSERT_TRUE(e->submit(one_token).ok());
  bool finished = false;
  while (!finished) {
    auto step = e->step();
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    for (const RequestOutput& o : *step) finished |= o.finished;
  }
  const int64_t before = e->totals().kv_offloaded_blocks;
  EXPECT_TRUE(e->has_unfinished()) << "its last step's blocks are still to be copied";
  ASSERT_TRUE(e->step().ok());
  EXPECT_GT(e->totals().kv_offloaded_blocks, before);
  EXPECT_GE(e->totals().kv_offloaded_blocks, full_blocks());
  EXPECT_FALSE(e->has_unfinished());
}

// With the prefetch on, a's prefix is read from disk while it waits; with it off, at its
// admission: the same tokens either way, and both served from disk.
TEST_F(KvTiersEngineTest, PrefetchOnAndOffServeTheSamePrefixFromDisk) {
  const Returned want = cold();
  for (const bool prefetch : {true, false}) {
    std::filesystem::remove_all(dir_);
    {
      auto e = make(/*host_blocks=*/4, /*with_disk=*/true);
      ASSERT_NE(e, nullptr);
      a_after_eviction(*e);
      run(*e, b_);
    }
    auto e = make(/*host_blocks=*/64, /*with_disk=*/true, "",
                  [&](EngineConfig& c) { c.kv_prefetch = prefetch; });
    ASSERT_NE(e, nullptr);
    const Returned got = run(*e, a_);
    expect_same(got, want);
    const EngineTotals t = e->totals();
    EXPECT_GT(got.metrics.num_disk_tier_tokens, 0) << "prefetch " << prefetch;
    EXPECT_EQ(t.kv_prefetched_blocks > 0, prefetch);
    EXPECT_EQ(t.kv_tier_faults, 0);
    EXPECT_EQ(e->last_step().num_free_blocks, e->kv_cache().num_blocks - 1);
  }
}

TEST_F(KvTiersEngineTest, CorruptDiskBlocksAreRecomputedWithTheSameOutput) {
  const Returned want = cold();
  {
    auto e = make(/*host_blocks=*/2, /*with_disk=*/true);
    ASSERT_NE(e, nullptr);
    run(*e, a_);
    run(*e, b_);
    run(*e, a_);
    run(*e, b_);
  }
  // Flip a byte near the end of every block file.
  int32_t corrupted = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
    if (entry.path().extension() != ".kvb") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0);
  auto e = make(/*host_blocks=*/2, /*with_disk=*/true);
  ASSERT_NE(e, nullptr);
  expect_same(run(*e, a_), want);
  EXPECT_EQ(e->totals().kv_disk_tier_hit_tokens, 0);
  EXPECT_GE(e->totals().kv_tier_faults, 1);
}

TEST_F(KvTiersEngineTest, AnotherModelOverTheSameDirectoryFindsNothing) {
  {
    auto e = make(/*host_blocks=*/2, /*with_disk=*/true);
    ASSERT_NE(e, nullptr);
    a_after_eviction(*e);
    run(*e, b_);
  }
  // The same weights under another checkpoint's name and config would be another model; here
  // the engine is told it serves qwen2-tied's checkpoint: another namespace.
  auto e = make(/*host_blocks=*/2, /*with_disk=*/true, kModelsDir + "qwen2-tied");
  ASSERT_NE(e, nullptr);
  run(*e, a_);
  EXPECT_EQ(e->totals().kv_disk_tier_hit_tokens, 0);
  EXPECT_EQ(e->totals().kv_host_tier_hit_tokens, 0);
}

TEST_F(KvTiersEngineTest, RefusesWhatItCannotServe) {
  // A small pool: the default (1 GiB on the CPU) is allocated before the tiers are looked at.
  const EngineConfig small = test_util::sized_for(EngineConfig{}, {a_}, 0);
  EngineConfig c = small;
  c.kv_disk_path = dir_.string();
  EXPECT_EQ(engine::create_engine(model_, pool_, c).status().code(), StatusCode::kInvalidArgument)
      << "a disk tier without a host tier";
  c = small;
  c.kv_offload_bytes = 64;
  EXPECT_EQ(engine::create_engine(model_, pool_, c).status().code(), StatusCode::kInvalidArgument)
      << "a host tier smaller than one block";
  c.kv_offload_bytes = int64_t{1} << 20;
  c.enable_prefix_caching = false;
  EXPECT_EQ(engine::create_engine(model_, pool_, c).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::engine

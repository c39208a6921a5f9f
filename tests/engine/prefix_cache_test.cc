// Prefix caching in strata::Engine's step loop, on every transformers fixture: a prompt whose
// leading blocks an earlier request computed skips them, and what it returns is what a cold run
// returns -- the same greedy tokens, and logits (seen through the top-20 raw logprobs of every
// generated token) within the CPU invariance tolerance, 1e-5. Also: tenants with other salts
// never hit, requests that want every prompt position's logits never skip, batch mates share,
// nothing leaks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "kv/block_hash.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

constexpr double kInvarianceTolerance = 1e-5;
const std::string kModelsDir = std::string(STRATA_TEST_DATA_DIR) + "/models/";

EngineRequest greedy(std::vector<int32_t> prompt, std::string salt = "") {
  EngineRequest r = test_util::greedy(std::move(prompt), 12, 20);
  r.cache_salt = std::move(salt);
  return r;
}

// What one request returned, and what the batch it ran in counted.
struct Returned {
  std::vector<int32_t> output_ids;
  std::vector<TokenLogprobs> output_logprobs;
};
struct Batch {
  std::vector<Returned> results;         // in request order
  int64_t num_cached_prompt_tokens = 0;  // prompt tokens the prefix cache served the batch
  int64_t num_prefill_tokens = 0;        // prompt tokens the batch's steps computed
};

// Submits the requests together and steps the engine until they finish (one batch); every
// request must be accepted and every step succeed.
Batch run(Engine& e, const std::vector<EngineRequest>& requests) {
  const int64_t cached_before = e.totals().num_cached_prompt_tokens;
  std::vector<RequestId> ids;
  for (const EngineRequest& r : requests) {
    auto id = e.submit(r);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (id.ok()) ids.push_back(*id);
  }
  Batch b;
  std::map<RequestId, test_util::Collected> got;
  while (e.has_unfinished()) {
    auto step = e.step();
    EXPECT_TRUE(step.ok()) << step.status().to_string();
    if (!step.ok()) break;
    b.num_prefill_tokens += e.last_step().num_prefill_tokens;
    for (const RequestOutput& o : *step) test_util::absorb(got[o.id], o);
  }
  for (const RequestId id : ids) b.results.push_back({got[id].tokens[0], got[id].logprobs[0]});
  b.num_cached_prompt_tokens = e.totals().num_cached_prompt_tokens - cached_before;
  return b;
}

// Relative L2 distance of two results' top-logprob vectors; the token ids must agree.
double max_rel_err(const Returned& a, const Returned& b) {
  EXPECT_EQ(a.output_ids, b.output_ids);
  return test_util::max_top_logprobs_rel_err(a.output_logprobs, b.output_logprobs);
}

class PrefixCacheEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  PrefixCacheEngineTest() : pool_(2), model_(model::Model::load({kModelsDir + GetParam()})) {
    prompt_ = test_util::fixture_prompt(GetParam());
    // A second prompt sharing the first 200 tokens, then going elsewhere.
    other_ = {prompt_.begin(), prompt_.begin() + 200};
    for (int32_t i = 0; i < 37; ++i) other_.push_back((i * 13 + 7) % 100);
  }

  // An engine over the model; num_blocks 0: a pool just large enough for sized_for's requests
  // run together.
  std::unique_ptr<Engine> make(EngineConfig config,
                               const std::vector<EngineRequest>& sized_for = {}) {
    if (config.num_blocks == 0) {
      config = test_util::sized_for(config, sized_for,
                                    kv::pool_sliding_window(model_.config().layer_sliding_window));
    }
    config.watermark = 0.0;
    auto e = engine::create_engine(model_, pool_, config);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  Returned cold(const EngineRequest& r) {
    EngineConfig config;
    config.enable_prefix_caching = false;
    auto e = make(config, {r});
    if (e == nullptr) return {};
    Batch b = run(*e, {r});
    EXPECT_EQ(b.num_cached_prompt_tokens, 0);
    return b.results.empty() ? Returned{} : b.results[0];
  }

  // Every layer uses a sliding window: the pool is window-capped and blocks before the window
  // go back to the pool (and to the front of the eviction order) every step.
  bool windowed() const { return kv::pool_sliding_window(model_.config().layer_sliding_window) > 0; }

  ThreadPool pool_;
  model::Model model_;
  std::vector<int32_t> prompt_, other_;
};

TEST_P(PrefixCacheEngineTest, PrefixHitMatchesAColdRun) {
  EngineConfig config;     // prefix caching on by default
  config.num_blocks = 64;  // room for both prompts: nothing is evicted
  auto e = make(config);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(run(*e, {greedy(prompt_)}).num_cached_prompt_tokens, 0);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);

  const Batch warm = run(*e, {greedy(other_)});
  ASSERT_EQ(warm.results.size(), 1u);
  EXPECT_EQ(warm.num_cached_prompt_tokens, 192) << "200 shared tokens: 12 blocks of 16";
  EXPECT_EQ(warm.num_prefill_tokens, static_cast<int64_t>(other_.size()) - 192);
  EXPECT_EQ(e->last_step().num_used_blocks, 0) << "leaked blocks";
  EXPECT_LE(max_rel_err(warm.results[0], cold(greedy(other_))), kInvarianceTolerance);

  // The very same prompt again: everything but its last block comes from the cache.
  const Batch again = run(*e, {greedy(prompt_)});
  ASSERT_EQ(again.results.size(), 1u);
  EXPECT_EQ(again.num_cached_prompt_tokens, static_cast<int64_t>((prompt_.size() - 1) / 16 * 16));
  EXPECT_LE(max_rel_err(again.results[0], cold(greedy(prompt_))), kInvarianceTolerance);
  EXPECT_GT(e->totals().prefix_hit_tokens, 0);
}

TEST_P(PrefixCacheEngineTest, ExactlySizedPoolEvictsTheLeastRecentlyFreedTailFirst) {
  if (windowed()) GTEST_SKIP() << "a window-capped pool: see sliding_window_test.cc";
  auto e = make({}, {greedy(prompt_)});  // a pool just large enough for prompt_
  ASSERT_NE(e, nullptr);
  run(*e, {greedy(prompt_)});
  run(*e, {greedy(other_)});
  // other_ took 4 new blocks: the tail of prompt_ (freed first), one of them never cached.
  EXPECT_EQ(e->totals().num_evictions, 3);
  const Batch again = run(*e, {greedy(prompt_)});
  ASSERT_EQ(again.results.size(), 1u);
  // prompt_ + 11 computed output tokens filled this many blocks; 3 of them were evicted.
  const auto num_full = static_cast<int64_t>(prompt_.size() + 11) / 16;
  const auto lookable = static_cast<int64_t>(prompt_.size() - 1) / 16;
  EXPECT_EQ(again.num_cached_prompt_tokens, std::min(num_full - 3, lookable) * 16);
  EXPECT_LE(max_rel_err(again.results[0], cold(greedy(prompt_))), kInvarianceTolerance);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

TEST_P(PrefixCacheEngineTest, OtherSaltsNeverHit) {
  EngineConfig config;
  config.num_blocks = 64;  // room for both tenants' copies
  auto e = make(config);
  ASSERT_NE(e, nullptr);
  run(*e, {greedy(prompt_, "tenant-a")});
  const Batch b = run(*e, {greedy(prompt_, "tenant-b")});
  ASSERT_EQ(b.results.size(), 1u);
  EXPECT_EQ(b.num_cached_prompt_tokens, 0);
  const Batch a = run(*e, {greedy(prompt_, "tenant-a")});
  ASSERT_EQ(a.results.size(), 1u);
  EXPECT_GT(a.num_cached_prompt_tokens, 0);
  EXPECT_EQ(a.results[0].output_ids, b.results[0].output_ids);
}

TEST_P(PrefixCacheEngineTest, TenantsNeverHitEachOtherWhateverSaltTheySend) {
  EngineConfig config;
  config.num_blocks = 64;
  auto e = make(config);
  ASSERT_NE(e, nullptr);
  EngineRequest alice = greedy(prompt_, "shared-salt");
  alice.tenant = "alice";
  EngineRequest bob = alice;
  bob.tenant = "bob";
  run(*e, {alice});
  const Batch b = run(*e, {bob});
  ASSERT_EQ(b.results.size(), 1u);
  EXPECT_EQ(b.num_cached_prompt_tokens, 0) << "same salt, other tenant: no hit";
  const EngineRequest plain = greedy(prompt_, "shared-salt");  // no tenant: its own salt only
  EXPECT_EQ(run(*e, {plain}).num_cached_prompt_tokens, 0);
  const Batch a = run(*e, {alice});
  ASSERT_EQ(a.results.size(), 1u);
  EXPECT_GT(a.num_cached_prompt_tokens, 0) << "a tenant hits its own prefix";
  EXPECT_EQ(a.results[0].output_ids, b.results[0].output_ids);
}

TEST(TenantSaltTest, IsAKeyedFunctionOfTenantAndRequestSalt) {
  const std::string s = kv::derive_tenant_salt("secret", "alice", "");
  EXPECT_EQ(s.size(), 64u);
  EXPECT_EQ(s, kv::derive_tenant_salt("secret", "alice", ""));
  EXPECT_NE(s, kv::derive_tenant_salt("other secret", "alice", ""));
  EXPECT_NE(s, kv::derive_tenant_salt("secret", "bob", ""));
  EXPECT_NE(s, kv::derive_tenant_salt("secret", "alice", "x"));
  // The separator keeps (tenant, salt) pairs apart: "ab" + "" differs from "a" + "b".
  EXPECT_NE(kv::derive_tenant_salt("k", "ab", ""), kv::derive_tenant_salt("k", "a", "b"));
  EXPECT_NE(kv::random_tenant_secret(), kv::random_tenant_secret());
}

TEST_P(PrefixCacheEngineTest, BatchMatesShareAPrefixComputedInAnEarlierStep) {
  // A window-capped pool gives the first prompt's early blocks back, and reuses them, while it
  // is still prefilling: the shared prefix is evicted before its batch mate can hit it.
  if (windowed()) GTEST_SKIP() << "a window-capped pool: see sliding_window_test.cc";
  EngineConfig config;
  config.max_num_batched_tokens = 64;  // the second prompt starts once the first is prefilled
  const std::vector<EngineRequest> batch = {greedy(prompt_), greedy(other_)};
  auto e = make(config, batch);
  ASSERT_NE(e, nullptr);
  const Batch out = run(*e, batch);
  ASSERT_EQ(out.results.size(), 2u);
  EXPECT_EQ(out.num_cached_prompt_tokens, 192);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  EXPECT_LE(max_rel_err(out.results[1], cold(greedy(other_))), kInvarianceTolerance);
}

TEST_P(PrefixCacheEngineTest, PromptLogitsAlwaysComputeEveryPosition) {
  EngineRequest r = test_util::greedy(prompt_, 1, -1);
  r.prompt_logits = true;
  auto e = make({}, {r});
  ASSERT_NE(e, nullptr);
  const RequestId first = *e->submit(r);
  auto got_first = test_util::drain(*e);
  const RequestId second = *e->submit(r);
  auto got_second = test_util::drain(*e);
  EXPECT_EQ(e->totals().num_cached_prompt_tokens, 0);
  ASSERT_FALSE(got_first[first].prompt_logits.empty());
  EXPECT_EQ(got_first[first].prompt_logits, got_second[second].prompt_logits);
}

INSTANTIATE_TEST_SUITE_P(Transformers, PrefixCacheEngineTest,
                         ::testing::Values("llama2-mha", "llama-mqa-bias", "llama3-gqa",
                                           "llama3-gqa-bf16", "mistral-swa", "qwen2-tied",
                                           "qwen3-qknorm", "qwen3-qknorm-f16", "mixtral-moe",
                                           "qwen3-moe", "gemma3-hybrid", "deepseek-v2-mla",
                                           "deepseek-v3-mla", "qwen2-yarn"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace strata::engine

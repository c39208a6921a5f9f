// Prefix caching in the step loop, on every transformers fixture: a prompt whose leading blocks
// an earlier request computed skips them, and what it returns is what a cold run returns -- the
// same greedy tokens, and logits (seen through the top-20 raw logprobs of every generated token)
// within the CPU invariance tolerance, 1e-5. Also: tenants with other salts never hit, requests
// that want every prompt position's logits never skip, batch mates share, nothing leaks.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/generator.h"
#include "kv/block_hash.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"

namespace strata::engine {
namespace {

constexpr double kInvarianceTolerance = 1e-5;
const std::string kModelsDir = std::string(STRATA_TEST_DATA_DIR) + "/models/";

std::vector<int32_t> fixture_prompt(const std::string& name) {
  const auto ref = model::SafetensorsFile::open(kModelsDir + name + "/reference.safetensors");
  const TensorView t = ref.tensor("prompt.0");
  const auto* p = static_cast<const int32_t*>(t.data);
  return {p, p + t.numel()};
}

GenerationRequest greedy(std::vector<int32_t> prompt, std::string salt = "") {
  GenerationRequest r{std::move(prompt), {}, std::move(salt)};
  r.params.temperature = 0.0f;
  r.params.max_tokens = 12;
  r.params.ignore_eos = true;
  r.params.logprobs = 20;
  return r;
}

// Relative L2 distance of two results' top-logprob vectors; the token ids must agree.
double max_rel_err(const GenerationResult& a, const GenerationResult& b) {
  EXPECT_EQ(a.output_ids, b.output_ids);
  return test_util::max_top_logprobs_rel_err(a.output_logprobs, b.output_logprobs);
}

class PrefixCacheEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  PrefixCacheEngineTest() : pool_(2), model_(model::Model::load({kModelsDir + GetParam()})) {
    prompt_ = fixture_prompt(GetParam());
    // A second prompt sharing the first 200 tokens, then going elsewhere.
    other_ = {prompt_.begin(), prompt_.begin() + 200};
    for (int32_t i = 0; i < 37; ++i) other_.push_back((i * 13 + 7) % 100);
  }

  GenerationResult cold(const GenerationRequest& r) {
    GeneratorConfig config;
    config.enable_prefix_caching = false;
    Generator g(model_, pool_, config);
    auto out = g.generate(std::vector<GenerationRequest>{r});
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(g.stats().num_cached_prompt_tokens, 0);
    return out.ok() ? (*out)[0] : GenerationResult{};
  }

  // Every layer uses a sliding window: the auto-sized pool is window-capped and blocks before
  // the window go back to the pool (and to the front of the eviction order) every step.
  bool windowed() const { return kv::pool_sliding_window(model_.config().layer_sliding_window) > 0; }

  ThreadPool pool_;
  model::Model model_;
  std::vector<int32_t> prompt_, other_;
};

TEST_P(PrefixCacheEngineTest, PrefixHitMatchesAColdRun) {
  GeneratorConfig config;  // prefix caching on by default
  config.num_blocks = 64;  // room for both prompts: nothing is evicted
  Generator g(model_, pool_, config);
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{greedy(prompt_)}).ok());
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, 0);
  EXPECT_EQ(g.num_used_blocks(), 0);

  auto warm = g.generate(std::vector<GenerationRequest>{greedy(other_)});
  ASSERT_TRUE(warm.ok()) << warm.status().to_string();
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, 192) << "200 shared tokens: 12 blocks of 16";
  EXPECT_EQ(g.stats().num_prefill_tokens, static_cast<int64_t>(other_.size()) - 192);
  EXPECT_EQ(g.num_used_blocks(), 0) << "leaked blocks";
  EXPECT_LE(max_rel_err((*warm)[0], cold(greedy(other_))), kInvarianceTolerance);

  // The very same prompt again: everything but its last block comes from the cache.
  auto again = g.generate(std::vector<GenerationRequest>{greedy(prompt_)});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(g.stats().num_cached_prompt_tokens,
            static_cast<int64_t>((prompt_.size() - 1) / 16 * 16));
  EXPECT_LE(max_rel_err((*again)[0], cold(greedy(prompt_))), kInvarianceTolerance);
  EXPECT_GT(g.stats().prefix_cache.num_hit_tokens, 0);
}

TEST_P(PrefixCacheEngineTest, ExactlySizedPoolEvictsTheLeastRecentlyFreedTailFirst) {
  if (windowed()) GTEST_SKIP() << "a window-capped pool: see sliding_window_test.cc";
  Generator g(model_, pool_, GeneratorConfig{});  // a pool just large enough for prompt_
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{greedy(prompt_)}).ok());
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{greedy(other_)}).ok());
  // other_ took 4 new blocks: the tail of prompt_ (freed first), one of them never cached.
  EXPECT_EQ(g.stats().prefix_cache.num_evictions, 3);
  auto again = g.generate(std::vector<GenerationRequest>{greedy(prompt_)});
  ASSERT_TRUE(again.ok());
  // prompt_ + 11 computed output tokens filled this many blocks; 3 of them were evicted.
  const auto num_full = static_cast<int64_t>(prompt_.size() + 11) / 16;
  const auto lookable = static_cast<int64_t>(prompt_.size() - 1) / 16;
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, std::min(num_full - 3, lookable) * 16);
  EXPECT_LE(max_rel_err((*again)[0], cold(greedy(prompt_))), kInvarianceTolerance);
  EXPECT_EQ(g.num_used_blocks(), 0);
}

TEST_P(PrefixCacheEngineTest, AnAutoSizedPoolGrowsForALargerBatchAndKeepsItsCache) {
  if (windowed()) GTEST_SKIP() << "a window-capped pool: see sliding_window_test.cc";
  Generator g(model_, pool_, GeneratorConfig{});  // sized for prompt_ alone
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{greedy(prompt_)}).ok());
  const int32_t first_size = g.stats().num_blocks;
  auto out = g.generate(std::vector<GenerationRequest>{greedy(other_), greedy(prompt_)});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_GT(g.stats().num_blocks, first_size);
  EXPECT_EQ(g.stats().prefix_cache.num_evictions, 0) << "new blocks are used first";
  EXPECT_EQ(g.stats().num_cached_prompt_tokens,
            192 + static_cast<int64_t>((prompt_.size() - 1) / 16 * 16));
  EXPECT_LE(max_rel_err((*out)[0], cold(greedy(other_))), kInvarianceTolerance);
  EXPECT_LE(max_rel_err((*out)[1], cold(greedy(prompt_))), kInvarianceTolerance);
  EXPECT_EQ(g.num_used_blocks(), 0);
}

TEST_P(PrefixCacheEngineTest, OtherSaltsNeverHit) {
  GeneratorConfig config;
  config.num_blocks = 64;  // room for both tenants' copies
  Generator g(model_, pool_, config);
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{greedy(prompt_, "tenant-a")}).ok());
  auto b = g.generate(std::vector<GenerationRequest>{greedy(prompt_, "tenant-b")});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, 0);
  auto a = g.generate(std::vector<GenerationRequest>{greedy(prompt_, "tenant-a")});
  ASSERT_TRUE(a.ok());
  EXPECT_GT(g.stats().num_cached_prompt_tokens, 0);
  EXPECT_EQ((*a)[0].output_ids, (*b)[0].output_ids);
}

TEST_P(PrefixCacheEngineTest, TenantsNeverHitEachOtherWhateverSaltTheySend) {
  GeneratorConfig config;
  config.num_blocks = 64;
  Generator g(model_, pool_, config);
  GenerationRequest alice = greedy(prompt_, "shared-salt");
  alice.tenant = "alice";
  GenerationRequest bob = alice;
  bob.tenant = "bob";
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{alice}).ok());
  auto b = g.generate(std::vector<GenerationRequest>{bob});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, 0) << "same salt, other tenant: no hit";
  GenerationRequest plain = greedy(prompt_, "shared-salt");  // no tenant: its own salt only
  ASSERT_TRUE(g.generate(std::vector<GenerationRequest>{plain}).ok());
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, 0);
  auto a = g.generate(std::vector<GenerationRequest>{alice});
  ASSERT_TRUE(a.ok());
  EXPECT_GT(g.stats().num_cached_prompt_tokens, 0) << "a tenant hits its own prefix";
  EXPECT_EQ((*a)[0].output_ids, (*b)[0].output_ids);
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
  GeneratorConfig config;
  config.max_num_batched_tokens = 64;  // the second prompt starts once the first is prefilled
  Generator g(model_, pool_, config);
  auto out = g.generate(std::vector<GenerationRequest>{greedy(prompt_), greedy(other_)});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, 192);
  EXPECT_EQ(g.num_used_blocks(), 0);
  EXPECT_LE(max_rel_err((*out)[1], cold(greedy(other_))), kInvarianceTolerance);
}

TEST_P(PrefixCacheEngineTest, PromptLogitsAlwaysComputeEveryPosition) {
  Generator g(model_, pool_, GeneratorConfig{});
  const std::vector<std::vector<int32_t>> prompts = {prompt_};
  auto first = g.prompt_logits(prompts);
  auto second = g.prompt_logits(prompts);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(g.stats().num_cached_prompt_tokens, 0);
  EXPECT_EQ((*first)[0], (*second)[0]);
}

INSTANTIATE_TEST_SUITE_P(Transformers, PrefixCacheEngineTest,
                         ::testing::Values("llama2-mha", "llama-mqa-bias", "llama3-gqa",
                                           "llama3-gqa-bf16", "mistral-swa", "qwen2-tied",
                                           "qwen3-qknorm", "qwen3-qknorm-f16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace strata::engine

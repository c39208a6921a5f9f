// KV tiers under caches of several groups, or of one windowed group (docs/kv.md, "KV tiers"): a
// hybrid model (a full-attention layer in group 0, a 64-token window in group 1), an INT4 cache
// with two newest blocks at full precision (R = 2: a hit reads one block of group 1 before its
// first computed position), an INT4 cache with R = 1 (group 1 needs nothing from a hit, so it has
// no tiers), and a model whose every layer has a window (group 0 windowed). Small limits keep
// the later groups' pools small, so a second prompt takes every block of both groups: without
// tiers the first prompt asked again finds nothing, with a host tier (and with a small host tier
// over disk, and after a restart over that disk) it finds its whole prefix -- group 0's chain and
// each later group's copies back from their own tiers -- and returns what a cold run returns
// (greedy tokens, top-5 logprobs within the CPU invariance tolerance, 1e-5). No block leaks.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "model/model.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

using test_util::Collected;

constexpr double kInvarianceTolerance = 1e-5;
const std::string kModelsDir = std::string(STRATA_TEST_DATA_DIR) + "/models/";

struct Case {
  std::string name;
  std::string model;  // a fixture, or "hybrid" (test_util::hybrid_model_dir)
  KvCacheDType dtype = KvCacheDType::kAuto;
  int32_t int4_residual = 0;
  size_t groups = 1;         // the engine's KV cache groups
  size_t tiered_groups = 1;  // of them, with tiers
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class KvTiersGroupsTest : public ::testing::TestWithParam<Case> {
 protected:
  KvTiersGroupsTest()
      : pool_(2),
        model_dir_(GetParam().model == "hybrid" ? test_util::hybrid_model_dir().string()
                                                : kModelsDir + GetParam().model),
        model_(model::Model::load({model_dir_})),
        dir_(std::filesystem::temp_directory_path() /
             ("strata_kv_tiers_groups_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    a_ = test_util::greedy(test_util::prompt_of(150, 1), 12, 5);
    b_ = test_util::greedy(test_util::prompt_of(150, 2), 12, 5);
  }
  ~KvTiersGroupsTest() override { std::filesystem::remove_all(dir_); }

  // A group-0 pool that holds one request, later groups' pools sized by one sequence and 32-token
  // chunks; host_share of the tiered groups' pools' bytes as the host tier (0: none), so that each
  // group's host tier holds that share of its pool, and a disk tier.
  EngineConfig config(double host_share, bool with_disk) {
    EngineConfig c;
    c.model_dir = model_dir_;
    c.kv_cache_dtype = GetParam().dtype;
    c.kv_int4_residual = GetParam().int4_residual;
    c.max_num_seqs = 1;
    c.max_num_batched_tokens = 32;
    c = test_util::sized_for(c, {a_}, 0);
    if (host_share > 0.0) {
      EngineConfig probe = c;
      auto e = engine::create_engine(model_, pool_, probe);
      EXPECT_TRUE(e.ok()) << e.status().to_string();
      int64_t pools = 0;  // the tiered groups', whose tiers share the bytes as their pools do
      for (size_t g = 0; g < GetParam().tiered_groups; ++g) pools += (*e)->kv_groups()[g].pool_bytes();
      c.kv_offload_bytes = static_cast<int64_t>(host_share * static_cast<double>(pools));
    }
    if (with_disk) {
      c.kv_disk_path = dir_.string();
      c.kv_disk_bytes = int64_t{1} << 30;
    }
    return c;
  }

  std::unique_ptr<Engine> make(const EngineConfig& c) {
    auto e = engine::create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static Collected run(Engine& e, const EngineRequest& r) {
    auto id = e.submit(r);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return test_util::drain(e)[*id];
  }

  Collected cold() {
    EngineConfig c = config(0.0, false);
    c.enable_prefix_caching = false;
    return run(*make(c), a_);
  }

  // a, then b (which takes every block of every group), then a again: what the second a returned.
  Collected a_after_eviction(Engine& e) {
    run(e, a_);
    run(e, b_);
    return run(e, a_);
  }

  // The prompt's full blocks, leaving its last token (what a whole-prefix hit serves).
  int32_t prefix_tokens() const { return static_cast<int32_t>((a_.prompt.size() - 1) / 16) * 16; }

  static void expect_same(const Collected& got, const Collected& want) {
    ASSERT_EQ(got.tokens.at(0), want.tokens.at(0));
    EXPECT_LT(test_util::max_top_logprobs_rel_err(got.logprobs.at(0), want.logprobs.at(0)),
              kInvarianceTolerance);
  }
  static void expect_no_leak(const Engine& e) {
    for (const KvGroupStats& g : e.kv_groups()) {
      EXPECT_EQ(g.num_used_blocks, 0) << g.kind << " group leaked blocks";
    }
  }

  ThreadPool pool_;
  std::string model_dir_;
  model::Model model_;
  std::filesystem::path dir_;
  EngineRequest a_, b_;
};

TEST_P(KvTiersGroupsTest, WithoutTiersTheSecondPromptTakesEveryBlock) {
  auto e = make(config(0.0, false));
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->kv_groups().size(), GetParam().groups);
  EXPECT_EQ(a_after_eviction(*e).metrics.num_cached_tokens, 0);
}

TEST_P(KvTiersGroupsTest, EveryGroupsBlocksComeBackFromHostMemory) {
  const Collected want = cold();
  auto e = make(config(/*host_share=*/4.0, false));
  ASSERT_NE(e, nullptr);
  const Collected got = a_after_eviction(*e);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, prefix_tokens());
  EXPECT_EQ(got.metrics.num_host_tier_tokens, prefix_tokens());
  EXPECT_EQ(e->totals().kv_tier_faults, 0);
  expect_no_leak(*e);
}

TEST_P(KvTiersGroupsTest, FromDiskAndFromDiskAfterARestart) {
  const Collected want = cold();
  const EngineConfig c = config(/*host_share=*/0.5, /*with_disk=*/true);
  {
    auto e = make(c);
    ASSERT_NE(e, nullptr);
    const Collected got = a_after_eviction(*e);
    expect_same(got, want);
    EXPECT_EQ(got.metrics.num_cached_tokens, prefix_tokens());
    EXPECT_GT(e->totals().kv_disk_written_blocks, 0);
    expect_no_leak(*e);
    run(*e, b_);  // a's blocks to disk again
  }
  auto e = make(c);
  ASSERT_NE(e, nullptr);
  const Collected got = run(*e, a_);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, prefix_tokens());
  EXPECT_GT(got.metrics.num_disk_tier_tokens, 0);
  EXPECT_EQ(e->totals().kv_tier_faults, 0);
  expect_no_leak(*e);
}

TEST_P(KvTiersGroupsTest, AHostTierTooSmallForALaterGroupIsRefusedNamingIt) {
  if (GetParam().tiered_groups < 2) GTEST_SKIP() << "one tiered group";
  EngineConfig c = config(/*host_share=*/0.15, false);  // group 0 gets a block or two
  auto e = engine::create_engine(model_, pool_, c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("KV cache group 1"), std::string::npos)
      << e.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(
    Caches, KvTiersGroupsTest,
    ::testing::Values(Case{"hybrid", "hybrid", KvCacheDType::kAuto, 0, 2, 2},
                      Case{"int4_two_newest", "llama3-gqa", KvCacheDType::kInt4, 32, 2, 2},
                      Case{"int4_one_newest", "llama3-gqa", KvCacheDType::kInt4, 0, 2, 1},
                      Case{"all_windowed", "mistral-swa", KvCacheDType::kAuto, 0, 1, 1}),
    case_name);

}  // namespace
}  // namespace strata::engine

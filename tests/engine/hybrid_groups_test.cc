// A model whose layers mix sliding-window and full attention, served over two KV cache groups
// (docs/kv.md, "KV cache groups"): the mistral-swa fixture with layer 0 made full attention
// (`layer_types`), so layer 1's 64-token window lives in a group of its own that gives back
// what the window has passed, while group 0 keeps every block of layer 0; and the gemma3-hybrid
// fixture (sliding, full, sliding layers, a 64-token window, RoPE of its own per layer type).
// Every output must equal
// the same model served from one pool (--disable-hybrid-kv-cache-manager, every layer's blocks
// kept) -- on the CPU bit for bit, whose kernels compute each element in one fixed order --
// alone, batched, chunked, after a prefix hit and after a preemption (recompute and swap), and no
// block of either group may leak.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "kv/kv_group.h"
#include "model/model.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

using test_util::Collected;
using test_util::hybrid_model_dir;
using test_util::newest_blocks_group;

constexpr int32_t kWindow = 64;

// Greedy requests longer than the window, with logprobs: a window layer that read a block it
// gave back (or another sequence's) would change them.
std::vector<EngineRequest> long_requests(int32_t n, int32_t max_tokens = 120) {
  std::vector<EngineRequest> r;
  for (int32_t i = 0; i < n; ++i) {
    r.push_back(test_util::greedy(test_util::prompt_of(30 + 37 * i, i), max_tokens, 5));
  }
  return r;
}

void expect_same(const Collected& want, const Collected& got, const std::string& what) {
  ASSERT_EQ(want.tokens, got.tokens) << what;
  const std::vector<TokenLogprobs>& a = want.logprobs.at(0);
  const std::vector<TokenLogprobs>& b = got.logprobs.at(0);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i].logprob, b[i].logprob, 1e-5) << what << ": token " << i;
    ASSERT_EQ(a[i].top_logprobs.size(), b[i].top_logprobs.size()) << what;
    for (size_t k = 0; k < a[i].top_logprobs.size(); ++k) {
      EXPECT_EQ(a[i].top_logprobs[k].first, b[i].top_logprobs[k].first) << what << ": token " << i;
      EXPECT_NEAR(a[i].top_logprobs[k].second, b[i].top_logprobs[k].second, 1e-5)
          << what << ": token " << i;
    }
  }
}

// The mistral-swa fixture made hybrid (hybrid_model_dir), or a fixture of tests/data/models.
std::filesystem::path model_dir(const std::string& name) {
  if (name == "mistral-hybrid") return hybrid_model_dir();
  return std::filesystem::path(STRATA_TEST_DATA_DIR) / "models" / name;
}

struct Param {
  std::string model;
  int32_t block_size;
};

class HybridGroupsTest : public ::testing::TestWithParam<Param> {
 protected:
  HybridGroupsTest() : pool_(2), model_(model::Model::load({model_dir(GetParam().model)})) {}

  int32_t block_size() const { return GetParam().block_size; }

  EngineConfig config(bool hybrid = true) const {
    EngineConfig c;
    c.block_size = block_size();
    c.num_blocks = 1 + 4 * ((30 + 37 * 3 + 120) / block_size() + 2);
    c.watermark = 0.0;
    // Small limits keep the windowed layers' pool (sized by them) small, so a block it gives
    // back is soon handed to another sequence and overwritten: reading one would show.
    c.max_num_seqs = 4;
    c.max_num_batched_tokens = 64;
    c.disable_hybrid_kv_cache_manager = !hybrid;
    return c;
  }

  // Each request alone, in an engine of c.
  std::vector<Collected> alone(const std::vector<EngineRequest>& requests, const EngineConfig& c) {
    std::vector<Collected> out;
    for (const EngineRequest& r : requests) {
      auto e = engine::create_engine(model_, pool_, c);
      EXPECT_TRUE(e.ok()) << e.status().to_string();
      const RequestId id = *(*e)->submit(r);
      out.push_back(test_util::drain(**e)[id]);
      EXPECT_EQ((*e)->totals().num_preemptions, 0) << "the pools hold the request";
      expect_no_leak(**e);
    }
    return out;
  }

  // Every request at once, in an engine of c.
  std::vector<Collected> together(const std::vector<EngineRequest>& requests,
                                  const EngineConfig& c) {
    auto e = engine::create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    std::vector<RequestId> ids;
    for (const EngineRequest& r : requests) ids.push_back(*(*e)->submit(r));
    std::map<RequestId, Collected> got = test_util::drain(**e);
    EXPECT_EQ((*e)->totals().num_preemptions, 0) << "the windowed layers' pool is never short";
    expect_no_leak(**e);
    std::vector<Collected> out;
    for (const RequestId id : ids) out.push_back(std::move(got[id]));
    return out;
  }

  static void expect_no_leak(const Engine& e) {
    for (const KvGroupStats& g : e.kv_groups()) {
      EXPECT_EQ(g.num_used_blocks, 0) << g.kind << " group leaked blocks";
    }
  }

  ThreadPool pool_;
  model::Model model_;
};

TEST_P(HybridGroupsTest, TheWindowedLayersGetAGroupOfTheirOwn) {
  const std::vector<int32_t>& windows = model_.config().layer_sliding_window;
  ASSERT_EQ(windows, GetParam().model == "gemma3-hybrid"
                         ? (std::vector<int32_t>{kWindow, 0, kWindow})
                         : (std::vector<int32_t>{0, kWindow}));
  auto e = engine::create_engine(model_, pool_, config());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const std::vector<KvGroupStats> groups = (*e)->kv_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].kind, "full attention");
  EXPECT_EQ(groups[1].kind, "sliding window");
  EXPECT_EQ(groups[1].window, kWindow);
  EXPECT_EQ(newest_blocks_group(**e).num_blocks, 0) << "no int4 residual pool";
  EXPECT_EQ((*e)->kv_cache().layer_dtypes.size(), windows.size());
  auto one = engine::create_engine(model_, pool_, config(/*hybrid=*/false));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->kv_groups().size(), 1u);
  EXPECT_EQ((*one)->kv_groups()[0].kind, "full attention") << "mixed layers keep every block";
}

TEST_P(HybridGroupsTest, AloneBatchedAndChunkedEqualOnePool) {
  const std::vector<EngineRequest> requests = long_requests(4);
  const std::vector<Collected> want = alone(requests, config(/*hybrid=*/false));
  const std::vector<Collected> solo = alone(requests, config());
  const std::vector<Collected> batched = together(requests, config());
  EngineConfig chunked = config();
  chunked.max_num_batched_tokens = 24;  // prompts prefill in chunks that straddle blocks
  const std::vector<Collected> chunks = together(requests, chunked);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(want[i].tokens.at(0).size(), 120u);
    expect_same(want[i], solo[i], "alone, request " + std::to_string(i));
    expect_same(want[i], batched[i], "batched, request " + std::to_string(i));
    expect_same(want[i], chunks[i], "chunked, request " + std::to_string(i));
  }
}

TEST_P(HybridGroupsTest, TheWindowGroupHoldsOnlyTheWindowWhileGroupZeroHoldsEverything) {
  const int32_t bs = block_size();
  auto e = engine::create_engine(model_, pool_, config());
  ASSERT_TRUE(e.ok());
  EngineRequest r = test_util::greedy(test_util::prompt_of(40, 9), 4 * kWindow, -1);
  ASSERT_TRUE((*e)->submit(r).ok());
  int32_t peak_window = 0;
  int32_t last_full = 0;
  while ((*e)->has_unfinished()) {
    ASSERT_TRUE((*e)->step().ok());
    const std::vector<KvGroupStats> g = (*e)->kv_groups();
    last_full = std::max(last_full, g[0].num_used_blocks);
    peak_window = std::max(peak_window, g[1].num_used_blocks);
  }
  const int32_t total = 40 + 4 * kWindow;
  EXPECT_EQ(last_full, (total - 1 + bs - 1) / bs) << "the full layer keeps every position";
  // Between steps at most ceil(window / bs) + 1 blocks, one more while a step appends.
  EXPECT_LE(peak_window, (kWindow + bs - 1) / bs + 2);
  EXPECT_LT(peak_window, last_full / 2) << "the window gives its past back";
  expect_no_leak(**e);
}

TEST_P(HybridGroupsTest, APrefixHitEqualsTheColdRun) {
  auto warm = engine::create_engine(model_, pool_, config());
  ASSERT_TRUE(warm.ok());
  const test_util::PrefixRun hit = test_util::run_extended_prompt(**warm, 5);
  EXPECT_GE(hit.got.metrics.num_cached_tokens, kWindow) << "both groups served the prefix";
  expect_no_leak(**warm);
  const std::vector<Collected> cold = alone({hit.second}, config(/*hybrid=*/false));
  expect_same(cold[0], hit.got, "after a prefix hit");
}

// preempting()'s 12 blocks of 16 tokens keep four requests of 40-43 + 24 tokens preempting
// (larger blocks leave them too little to grow into), so this one runs at block size 16.
TEST_P(HybridGroupsTest, PreemptedRequestsEqualOnePool) {
  EngineConfig hybrid = config();
  hybrid.block_size = 16;
  EngineConfig one = config(/*hybrid=*/false);
  one.block_size = 16;
  one.num_blocks = 1 + 4 * ((30 + 37 * 3 + 120) / 16 + 2);
  for (const PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    const EngineConfig c = test_util::preempting(hybrid, mode);
    auto e = engine::create_engine(model_, pool_, c);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    const test_util::Submitted s = test_util::submit_preempted(**e, 4, 5);
    std::map<RequestId, Collected> got = test_util::drain(**e);
    test_util::expect_preemption_totals(**e, mode);
    expect_no_leak(**e);
    const std::vector<Collected> want = alone(s.requests, one);
    for (size_t i = 0; i < s.ids.size(); ++i) {
      expect_same(want[i], got[s.ids[i]], "preempted, request " + std::to_string(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ModelsAndBlockSizes, HybridGroupsTest,
                         ::testing::Values(Param{"mistral-hybrid", 16}, Param{"mistral-hybrid", 32},
                                           Param{"gemma3-hybrid", 16}, Param{"gemma3-hybrid", 32}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           std::string name = info.param.model;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name + "_Bs" + std::to_string(info.param.block_size);
                         });

}  // namespace
}  // namespace strata::engine

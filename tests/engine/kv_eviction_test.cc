// Token eviction in the step loop (docs/kv-eviction.md) on the llama3-gqa fixture: a budget the
// sequence never exceeds changes nothing (bit-equal tokens and logprobs); a small one takes
// exactly the blocks the policy's definition names, step after step (hand-computed counts); the
// prefix cache never serves what an evicted sequence computed after its eviction; forks evict
// on their own without freeing each other's blocks; preemption (recompute and swap) returns what
// the request gets alone; the engine refuses what it cannot run (a windowed model, PagedEviction
// over a quantized pool); a server default applies to requests that name none. No block leaks.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "kv_eviction_testing.h"
#include "model/model.h"
#include "strata/engine.h"

namespace strata {
namespace {

const std::string kModels = std::string(STRATA_TEST_DATA_DIR) + "/models/";

using engine::test_util::Collected;
using engine::test_util::drain;
using engine::test_util::expect_same;
using engine::test_util::greedy;
using engine::test_util::prompt_of;

using engine::test_util::eviction;
using engine::test_util::with;

class KvEvictionEngineTest : public engine::test_util::KvEvictionFixture {
 protected:
  // r returns got in 7-token chunks and among three batch mates too, on engines configured as c.
  void expect_independent_of_chunks_and_batch(const EngineRequest& r, const Collected& got,
                                              const EngineConfig& c = {});
};

TEST_F(KvEvictionEngineTest, ABudgetTheSequenceNeverExceedsChangesNothing) {
  const EngineRequest plain = greedy(prompt_of(300, 1), 20);
  const Collected ref = alone(plain);
  for (const KvEvictionPolicy p :
       {KvEvictionPolicy::kStreamingLlm, KvEvictionPolicy::kPagedEviction}) {
    const Collected got = alone(with(plain, eviction(p, 320)));
    EXPECT_EQ(got.tokens.at(0), ref.tokens.at(0));
    ASSERT_EQ(got.logprobs.at(0).size(), ref.logprobs.at(0).size());
    for (size_t i = 0; i < ref.logprobs.at(0).size(); ++i) {
      EXPECT_EQ(got.logprobs.at(0)[i].logprob, ref.logprobs.at(0)[i].logprob) << "bit-equal";
      EXPECT_EQ(got.logprobs.at(0)[i].top_logprobs, ref.logprobs.at(0)[i].top_logprobs);
    }
    EXPECT_EQ(got.metrics.num_evicted_blocks, 0);
    EXPECT_EQ(got.metrics.max_held_blocks, 20) << "320 slots in blocks of 16";
  }
}

// Block size 16, a 64-token prompt, 40 tokens (39 computed after the prompt), budget 32, sink 4
// (block 0), window 28. The prompt: the first chunk runs to 48, the first block boundary past the
// budget; there the window's slots 20..47 reach into block 1, so nothing goes (3 blocks). The next
// chunk ends at the prompt's end, 64: the window is slots 36..63 (blocks 2, 3) and block 1 goes
// (48 slots, 3 blocks). Each decode step adds a slot; when 60 are held the window starts at slot
// 32 (block 2): block 1 goes again (44 slots), after decode steps 12 and 28. 3 blocks in all,
// never more than 4 held.
TEST_F(KvEvictionEngineTest, StreamingLlmTakesTheBlocksItsDefinitionNames) {
  const EngineRequest r =
      with(greedy(prompt_of(64, 2), 40), eviction(KvEvictionPolicy::kStreamingLlm, 32, 4));
  Collected got;
  const std::vector<int32_t> used = used_blocks_per_step(r, &got);
  ASSERT_EQ(used.size(), 41u) << "two prefill steps, then 39 decode steps (the last finishes)";
  std::vector<int32_t> want = {3, 3};  // after each prefill chunk
  int32_t slots = 48;
  for (int32_t k = 1; k < 40; ++k) {
    ++slots;
    if (slots == 60) slots = 44;
    want.push_back((slots + 15) / 16);
  }
  want.back() = 0;  // the finished sequence gave its blocks back
  EXPECT_EQ(used, want);
  EXPECT_EQ(got.metrics.num_evicted_blocks, 3);
  EXPECT_EQ(got.metrics.max_held_blocks, 4);
  // It changed what the model saw: the full cache's tokens or logprobs differ.
  const Collected full = alone(greedy(prompt_of(64, 2), 40));
  auto chosen = [](const Collected& c) {
    std::vector<float> l;
    for (const TokenLogprobs& t : c.logprobs.at(0)) l.push_back(t.logprob);
    return l;
  };
  EXPECT_NE(chosen(got), chosen(full));
}

// A 200-token prompt under a 64-token StreamingLLM budget (sink 4, window 60) holds at most 6
// blocks while its prompt is computed, not the prompt's 13: the chunks stop at each block
// boundary past the budget (80, 96, ..., 192, then the prompt's end), and from 96 on one block
// goes at each (5 blocks, 80 slots), then 6 at the prompt's end (88 slots); in decode one more
// goes when 92 slots are held (the window's start reaches block 2). The points where
// blocks go depend on the sequence alone: 7-token chunks (and any batch) give the same tokens and
// logprobs, and so does running among other requests.
TEST_F(KvEvictionEngineTest, StreamingLlmHoldsItsBudgetWhileThePromptIsComputed) {
  const EngineRequest r =
      with(greedy(prompt_of(200, 6), 20), eviction(KvEvictionPolicy::kStreamingLlm, 64));
  const Collected got = alone(r);
  EXPECT_EQ(got.metrics.max_held_blocks, 6);
  EXPECT_EQ(got.metrics.num_evicted_blocks, 7 + 1) << "96, 112, ..., 192 and one in decode";
  expect_independent_of_chunks_and_batch(r, got);
}

// The same prompt with the policy run every 48 tokens of the prompt instead of every block
// (--kv-eviction-prefill-interval, the GPU's way: fewer, longer chunks). The chunks stop at 96,
// 144 and 192 (the multiples of 48 past the budget), then at the prompt's end: at 96 block 1
// goes (80 slots: the sink block and the 60-token window's); at 144 and 192, 128 slots each, blocks
// 1-3 of the row (80 left); at 200 nothing can (88 slots, all protected). In decode one goes at 92
// slots, as with the block interval. So 8 blocks in all, as many as every block's points take,
// in 4 prompt steps instead of 9; during a step it holds up to 8 blocks (the budget + the
// interval) instead of 6, after one at most 6 either way. Still independent of chunking and batch.
TEST_F(KvEvictionEngineTest, AWiderPrefillIntervalEvictsAtItsMultiples) {
  const EngineRequest r =
      with(greedy(prompt_of(200, 6), 20), eviction(KvEvictionPolicy::kStreamingLlm, 64));
  EngineConfig wide;
  wide.num_blocks = 256;
  wide.kv_eviction_prefill_interval_tokens = 48;
  auto e = make(wide);
  const RequestId id = *e->submit(r);
  std::vector<int32_t> used;
  std::map<RequestId, Collected> got;
  while (e->has_unfinished()) {
    drain_into(*e, got, 1);
    used.push_back(e->last_step().num_used_blocks);
  }
  const std::vector<int32_t> prompt_steps(used.begin(), used.begin() + 4);
  EXPECT_EQ(prompt_steps, (std::vector<int32_t>{5, 5, 5, 6})) << "blocks held after each chunk";
  EXPECT_EQ(used.size(), 4u + 19u) << "four prompt steps, then 19 decode steps";
  EXPECT_EQ(got[id].metrics.num_evicted_blocks, 8);
  EXPECT_EQ(got[id].metrics.max_held_blocks, 6);
  expect_independent_of_chunks_and_batch(r, got[id], wide);
  // The interval must fall on block boundaries.
  EngineConfig bad;
  bad.kv_eviction_prefill_interval_tokens = 40;
  EXPECT_FALSE(engine::create_engine(model_, pool_, bad).ok());
}

// The same for PagedEviction (its scores read the blocks the chunks wrote): under a 64-token budget
// (no sink, no window) a 200-token prompt's chunks stop at 80, 96, ..., 192, and one block goes at
// each and at the prompt's end (4 blocks held after each); one more goes in decode at 65 slots.
TEST_F(KvEvictionEngineTest, PagedEvictionHoldsItsBudgetWhileThePromptIsComputed) {
  const EngineRequest r =
      with(greedy(prompt_of(200, 9), 20), eviction(KvEvictionPolicy::kPagedEviction, 64));
  const Collected got = alone(r);
  EXPECT_EQ(got.metrics.max_held_blocks, 4);
  EXPECT_EQ(got.metrics.num_evicted_blocks, 8 + 1 + 1) << "80, 96, ..., 192, 200 and in decode";
  expect_independent_of_chunks_and_batch(r, got);
}

void KvEvictionEngineTest::expect_independent_of_chunks_and_batch(const EngineRequest& r,
                                                                  const Collected& got,
                                                                  const EngineConfig& c) {
  EngineConfig chunked = c;
  chunked.max_num_batched_tokens = 7;
  const Collected small_chunks = alone(r, chunked);
  expect_same(small_chunks, got);
  EXPECT_EQ(small_chunks.metrics.num_evicted_blocks, got.metrics.num_evicted_blocks);
  auto e = make(c);
  std::vector<RequestId> others;
  for (int32_t i = 0; i < 3; ++i) others.push_back(*e->submit(greedy(prompt_of(90 + i, i), 30)));
  const RequestId id = *e->submit(r);
  const Collected batched = drain(*e)[id];
  expect_same(batched, got);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

// PagedEviction with no sink and no window: the prompt's first chunk stops at 48 (the first
// boundary past the budget), where one of blocks 0, 1 goes (the lower score; 32 slots left); at
// the prompt's end, 64, one more. From then on one block goes whenever a 33rd slot opens a third
// block: after decode steps 1, 17 and 33. Five blocks in all, and 2 held after every step.
TEST_F(KvEvictionEngineTest, PagedEvictionKeepsTheBudgetBlockByBlock) {
  const EngineRequest r =
      with(greedy(prompt_of(64, 3), 40), eviction(KvEvictionPolicy::kPagedEviction, 32));
  Collected got;
  const std::vector<int32_t> used = used_blocks_per_step(r, &got);
  ASSERT_EQ(used.size(), 41u);
  for (size_t i = 0; i + 1 < used.size(); ++i) EXPECT_EQ(used[i], 2) << "step " << i;
  EXPECT_EQ(got.metrics.num_evicted_blocks, 5);
  EXPECT_EQ(got.metrics.max_held_blocks, 2);
}

TEST_F(KvEvictionEngineTest, ThePrefixCacheNeverServesWhatAnEvictedSequenceComputedAfterward) {
  auto e = make();
  const std::vector<int32_t> prompt = prompt_of(64, 4);
  const RequestId a =
      *e->submit(with(greedy(prompt, 40), eviction(KvEvictionPolicy::kStreamingLlm, 32, 4)));
  const Collected first = drain(*e)[a];
  ASSERT_EQ(first.metrics.num_evicted_blocks, 3);
  // The prompt and everything A generated, without eviction: only the prompt's 4 blocks, computed
  // before A's first eviction, may come from the cache (A's later blocks attended to a gapped
  // context), and the result is a cold run's.
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), first.tokens.at(0).begin(), first.tokens.at(0).end());
  const RequestId b = *e->submit(greedy(longer, 8));
  const Collected second = drain(*e)[b];
  EXPECT_EQ(second.metrics.num_cached_tokens, 64);
  EngineConfig cold;
  cold.enable_prefix_caching = false;
  const Collected ref = alone(greedy(longer, 8), cold);
  expect_same(second, ref);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

// The prompt's blocks are cached whole by a run without eviction; an evicting request of the same
// prompt takes them only up to its budget's first eviction point (here the hit stops at 64 of its
// 200 tokens: the first boundary past 64 slots is 80), since past it a cold run of the request
// computes its K/V over an evicted context. It returns what it returns on a fresh engine.
TEST_F(KvEvictionEngineTest, APrefixHitStopsBeforeTheFirstEvictionPoint) {
  const std::vector<int32_t> prompt = prompt_of(200, 7);
  const EngineRequest evicting =
      with(greedy(prompt, 20), eviction(KvEvictionPolicy::kStreamingLlm, 64));
  const Collected cold = alone(evicting);
  auto e = make();
  const RequestId warm_up = *e->submit(greedy(prompt, 4));
  drain(*e);
  (void)warm_up;
  const RequestId id = *e->submit(evicting);
  const Collected hit = drain(*e)[id];
  EXPECT_EQ(hit.metrics.num_cached_tokens, 64);
  expect_same(hit, cold);
  EXPECT_EQ(hit.metrics.num_evicted_blocks, cold.metrics.num_evicted_blocks);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

// A pool of 12 blocks (192 slots) cannot hold a 400-token prompt and 100 more tokens: refused
// without eviction; under a 64-token StreamingLLM budget the request never holds more than
// kv::max_held_slots = 4 + 60 + 15 + 16 rounded up to blocks, 7, and runs to the end.
TEST_F(KvEvictionEngineTest, ARequestLongerThanThePoolRunsUnderABudget) {
  EngineConfig small;
  small.num_blocks = 1 + 12;
  small.watermark = 0.0;
  auto e = make(small);
  const EngineRequest plain = greedy(prompt_of(400, 8), 100);
  auto refused = e->submit(plain);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("more KV blocks than the pool has"), std::string::npos);
  const EngineRequest evicting = with(plain, eviction(KvEvictionPolicy::kStreamingLlm, 64));
  const RequestId id = *e->submit(evicting);
  const Collected got = drain(*e)[id];
  ASSERT_TRUE(got.finished);
  EXPECT_EQ(got.tokens.at(0).size(), 100u);
  EXPECT_LE(got.metrics.max_held_blocks, 7);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
  // The same as in a pool that holds it whole.
  const Collected roomy = alone(evicting);
  expect_same(got, roomy);
}

TEST_F(KvEvictionEngineTest, ForksEvictOnTheirOwnWithoutFreeingEachOthersBlocks) {
  EngineRequest r =
      with(greedy(prompt_of(70, 5), 40), eviction(KvEvictionPolicy::kStreamingLlm, 32, 4));
  const Collected one = alone(r);
  r.n = 3;  // greedy forks: three copies of the same sequence, sharing the prompt's blocks
  const Collected three = alone(r);
  for (int32_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("fork " + std::to_string(i));
    expect_same(three, one, i);
  }
  EXPECT_GT(three.metrics.num_evicted_blocks, one.metrics.num_evicted_blocks);
}

class KvEvictionPreemptionTest : public KvEvictionEngineTest,
                                 public ::testing::WithParamInterface<PreemptionMode> {};

// Twelve 16-token blocks, requests of 40-47 prompt tokens and 24 output tokens under a 16-token
// StreamingLLM budget (sink 4, window 8: block 1 goes at the prompt's end and again 16 tokens
// later): they preempt each other after evicting. Each request's tokens and logprobs are what it
// gets alone (a recompute repeats its evictions at the same points; recomputing the whole
// sequence and evicting after would not give the same K/V).
TEST_P(KvEvictionPreemptionTest, PreemptedEvictedRequestsGetWhatTheyGetAlone) {
  // PagedEviction too, with no sink or window so that its scores choose among several blocks: a
  // swapped sequence keeps its blocks' scores, a recomputed one scores its blocks again.
  for (const KvEvictionParams& policy : {eviction(KvEvictionPolicy::kStreamingLlm, 16, 4, 8),
                                         eviction(KvEvictionPolicy::kPagedEviction, 32, 0, 0)}) {
    SCOPED_TRACE(kv_eviction_policy_name(*policy.policy));
    expect_preempted_requests_get_what_they_get_alone(policy, GetParam());
  }
}

// A PagedEviction sequence preempted after many evictions: A (priority 1, budget 48, no sink or
// window) decodes alone for 60 steps, evicting a block every 16 tokens; then B (priority 0, no
// eviction) arrives and outgrows the 12-block pool, and A, the lowest-ranked, is preempted. A's
// tokens and logprobs are still those it gets alone: by swap its blocks come back with their
// cached scores, by recompute it repeats its evictions and scores its blocks again.
TEST_P(KvEvictionPreemptionTest, APagedEvictionSequencePreemptedLateGetsWhatItGetsAlone) {
  EngineConfig c = engine::test_util::preempting({}, GetParam());
  c.policy = SchedulingPolicy::kPriority;
  const EngineRequest a =
      with(greedy(prompt_of(60, 11), 120), eviction(KvEvictionPolicy::kPagedEviction, 48, 0, 0));
  const EngineRequest b = greedy(prompt_of(120, 12), 60);
  auto e = make(c);
  const engine::test_util::LatePreemption got = engine::test_util::preempt_late(*e, a, b);
  ASSERT_GT(got.a.metrics.num_evicted_blocks, 2);
  const Collected ref = alone(a);
  expect_same(got.a, ref);
  EXPECT_EQ(got.a.metrics.num_evicted_blocks, ref.metrics.num_evicted_blocks);
  EXPECT_EQ(got.b.tokens.at(0), alone(b).tokens.at(0));
}

INSTANTIATE_TEST_SUITE_P(Modes, KvEvictionPreemptionTest,
                         ::testing::Values(PreemptionMode::kRecompute, PreemptionMode::kSwap),
                         engine::test_util::preemption_mode_name);

TEST_F(KvEvictionEngineTest, TheServerDefaultAppliesToRequestsThatNameNone) {
  EngineConfig c;
  c.kv_eviction = eviction(KvEvictionPolicy::kStreamingLlm, 32, 4);
  const EngineRequest plain = greedy(prompt_of(64, 2), 40);
  const Collected by_default = alone(plain, c);
  const Collected named = alone(with(plain, eviction(KvEvictionPolicy::kStreamingLlm, 32, 4)));
  EXPECT_EQ(by_default.tokens.at(0), named.tokens.at(0));
  EXPECT_EQ(by_default.metrics.num_evicted_blocks, 3);
  // A request's policy none turns it off; a budget alone keeps the default's policy.
  EXPECT_EQ(alone(with(plain, eviction(KvEvictionPolicy::kNone, 0)), c).metrics.num_evicted_blocks,
            0);
  KvEvictionParams budget_only;
  budget_only.budget_tokens = 48;
  EXPECT_GT(alone(with(plain, budget_only), c).metrics.num_evicted_blocks, 0);
  // A default policy without a budget is refused at creation.
  EngineConfig bad;
  bad.kv_eviction.policy = KvEvictionPolicy::kPagedEviction;
  bad.num_blocks = 64;
  EXPECT_FALSE(engine::create_engine(model_, pool_, bad).ok());
}

// PagedEviction reads an int8 pool's K and V through their per-token scales: over a 96-token prompt
// under a 32-token budget it evicts as many blocks as over float32 (the count is the budget's;
// which ones is the scores', and int8's round each norm by under 1 %), and gives every block back.
TEST_F(KvEvictionEngineTest, PagedEvictionScoresAnInt8Pool) {
  const EngineRequest r =
      with(greedy(prompt_of(96, 4), 24), eviction(KvEvictionPolicy::kPagedEviction, 32));
  EngineConfig int8;
  int8.kv_cache_dtype = KvCacheDType::kInt8;
  const Collected quantized = alone(r, int8);
  const Collected exact = alone(r);
  EXPECT_GT(exact.metrics.num_evicted_blocks, 0);
  EXPECT_EQ(quantized.metrics.num_evicted_blocks, exact.metrics.num_evicted_blocks);
  EXPECT_EQ(quantized.metrics.max_held_blocks, exact.metrics.max_held_blocks);
  EXPECT_EQ(quantized.tokens.at(0).size(), 24u);
}

// An MLA latent cache (DeepSeek): StreamingLLM and H2O evict and compact its one row per token
// and give every block back; PagedEviction, whose score is ||V|| / ||K||, is refused (the latent
// is both).
TEST_F(KvEvictionEngineTest, AnMlaLatentCacheEvictsButIsNotScoredByValueOverKey) {
  model::Model mla = model::Model::load({kModels + "deepseek-v2-mla"});
  EngineConfig c;
  c.num_blocks = 64;
  for (const KvEvictionPolicy p : {KvEvictionPolicy::kStreamingLlm, KvEvictionPolicy::kH2O}) {
    auto e = engine::create_engine(mla, pool_, c);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    const Result<RequestId> id = (*e)->submit(with(greedy(prompt_of(120, 3), 30), eviction(p, 48)));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    const Collected got = drain(**e)[*id];
    EXPECT_EQ(got.tokens.at(0).size(), 30u) << kv_eviction_policy_name(p);
    EXPECT_GT(got.metrics.num_evicted_blocks + got.metrics.num_evicted_tokens, 0);
    EXPECT_EQ((*e)->last_step().num_used_blocks, 0) << "blocks leaked";
  }
  auto e = engine::create_engine(mla, pool_, c);
  ASSERT_TRUE(e.ok());
  const Result<RequestId> paged =
      (*e)->submit(with(greedy(prompt_of(40, 1)), eviction(KvEvictionPolicy::kPagedEviction, 16)));
  ASSERT_FALSE(paged.ok());
  EXPECT_NE(paged.status().message().find("MLA latent"), std::string::npos)
      << paged.status().to_string();
}

TEST_F(KvEvictionEngineTest, RefusesWhatItCannotRun) {
  auto e = make();
  auto no_budget =
      e->submit(with(greedy(prompt_of(20, 1)), KvEvictionParams{KvEvictionPolicy::kStreamingLlm}));
  ASSERT_FALSE(no_budget.ok());
  EXPECT_EQ(no_budget.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_budget.status().message().find("budget_tokens"), std::string::npos);
  EXPECT_FALSE(
      e->submit(with(greedy(prompt_of(20, 1)), eviction(KvEvictionPolicy::kStreamingLlm, 8, 6, 6)))
          .ok());
  // An int4 cache keeps its newest blocks in a second group: refused for every policy.
  EngineConfig int4;
  int4.kv_cache_dtype = KvCacheDType::kInt4;
  auto q = make(int4);
  ASSERT_NE(q, nullptr);
  EXPECT_FALSE(
      q->submit(with(greedy(prompt_of(20, 1)), eviction(KvEvictionPolicy::kStreamingLlm, 16)))
          .ok());
  // A model whose layers use a sliding window keeps a window group: refused.
  model::Model swa = model::Model::load({kModels + "mistral-swa"});
  EngineConfig sc;
  sc.num_blocks = 64;
  auto w = engine::create_engine(swa, pool_, sc);
  ASSERT_TRUE(w.ok());
  auto refused =
      (*w)->submit(with(greedy(prompt_of(20, 1)), eviction(KvEvictionPolicy::kStreamingLlm, 16)));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("full-attention"), std::string::npos);
}

}  // namespace
}  // namespace strata

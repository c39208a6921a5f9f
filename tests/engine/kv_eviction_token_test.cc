// Token-level eviction in the step loop (docs/kv-eviction.md) on the llama3-gqa fixture: H2O and
// SnapKV take single tokens and compact, so a sequence holds ceil(kept / block_size) blocks. A
// budget the sequence never exceeds changes nothing (bit-equal); H2O holds exactly its budget after
// every step and SnapKV evicts once, at the prompt's end (hand-computed counts); the results do
// not depend on chunking, batch mates, forks or preemption (recompute repeats the recorded
// evictions, and the attention mass a recompute adds up again is the same); such a sequence
// never enters the prefix cache. SnapKV per (layer, KV head) -- the default -- and with one
// selection for all (shared) alike; on strata-tiny the two keep different tokens, and per head
// runs over INT8, FP8 and BF16 caches. No block leaks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <span>
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

using engine::test_util::Collected;
using engine::test_util::drain;
using engine::test_util::expect_same;
using engine::test_util::greedy;
using engine::test_util::preempting;
using engine::test_util::prompt_of;

using engine::test_util::eviction;
using engine::test_util::with;

class KvEvictionTokenTest : public engine::test_util::KvEvictionFixture {};

// SnapKV with its selection named: per (layer, KV head) or one for all.
KvEvictionParams snapkv(int32_t budget, KvEvictionSelection selection) {
  KvEvictionParams p = eviction(KvEvictionPolicy::kSnapKv, budget);
  p.selection = selection;
  return p;
}

std::string name_of(const KvEvictionParams& p) {
  std::string name = kv_eviction_policy_name(*p.policy);
  if (p.selection) name += std::string(" ") + kv_eviction_selection_name(*p.selection);
  return name;
}

constexpr KvEvictionSelection kPerHead = KvEvictionSelection::kPerHead;
constexpr KvEvictionSelection kShared = KvEvictionSelection::kShared;

TEST_F(KvEvictionTokenTest, ABudgetTheSequenceNeverExceedsChangesNothing) {
  const EngineRequest plain = greedy(prompt_of(300, 1), 20);
  const Collected ref = alone(plain);
  for (const KvEvictionPolicy p : {KvEvictionPolicy::kH2O, KvEvictionPolicy::kSnapKv}) {
    SCOPED_TRACE(kv_eviction_policy_name(p));
    const Collected got = alone(with(plain, eviction(p, 320)));
    EXPECT_EQ(got.tokens.at(0), ref.tokens.at(0));
    ASSERT_EQ(got.logprobs.at(0).size(), ref.logprobs.at(0).size());
    for (size_t i = 0; i < ref.logprobs.at(0).size(); ++i) {
      EXPECT_EQ(got.logprobs.at(0)[i].logprob, ref.logprobs.at(0)[i].logprob) << "bit-equal";
    }
    EXPECT_EQ(got.metrics.num_evicted_tokens, 0);
    EXPECT_EQ(got.metrics.max_held_blocks, 20) << "320 slots in blocks of 16";
  }
}

// Block size 16, a 64-token prompt, 40 tokens (39 computed after the prompt), budget 32. The
// first chunk runs to 48, the first block boundary past the budget: 16 tokens go (32 held, 2
// blocks). The next ends at the prompt's end, 64: 16 more. Then every decode step adds a slot
// and one token goes. 16 + 16 + 39 tokens in all, 2 blocks held after every step.
TEST_F(KvEvictionTokenTest, H2OHoldsExactlyItsBudgetAfterEveryStep) {
  const EngineRequest r = with(greedy(prompt_of(64, 2), 40), eviction(KvEvictionPolicy::kH2O, 32));
  Collected got;
  const std::vector<int32_t> used = used_blocks_per_step(r, &got);
  ASSERT_EQ(used.size(), 41u) << "two prefill steps, then 39 decode steps (the last finishes)";
  for (size_t i = 0; i + 1 < used.size(); ++i) EXPECT_EQ(used[i], 2) << "step " << i;
  EXPECT_EQ(got.metrics.num_evicted_tokens, 16 + 16 + 39);
  EXPECT_EQ(got.metrics.num_evicted_blocks, 0);
  EXPECT_EQ(got.metrics.max_held_blocks, 2);
  EXPECT_EQ(got.tokens.at(0).size(), 40u);
  // The same evictions without compaction hold every block with a live position: at least the
  // compacted 2, at most the 7 of 103 positions.
  EXPECT_GE(got.metrics.max_blocks_without_compaction, 2);
  EXPECT_LE(got.metrics.max_blocks_without_compaction, 7);
}

// A 100-token prompt under a budget of 48 (window min(32, 48 / 2) = 24): the whole prompt is
// computed at once, then 52 tokens go and 48 stay (3 blocks); the 20 generated tokens are all
// kept (68 slots, 5 blocks).
TEST_F(KvEvictionTokenTest, SnapKvEvictsOnceAtThePromptsEnd) {
  const EngineRequest r =
      with(greedy(prompt_of(100, 3), 21), eviction(KvEvictionPolicy::kSnapKv, 48));
  Collected got;
  const std::vector<int32_t> used = used_blocks_per_step(r, &got);
  ASSERT_EQ(used.size(), 21u) << "one prefill step, then 20 decode steps";
  EXPECT_EQ(used[0], 3);
  EXPECT_EQ(used[19], 5) << "48 + 19 computed tokens";
  EXPECT_EQ(got.metrics.num_evicted_tokens, 52);
}

// The log-softmax of one logits row at `token`, in double.
double log_softmax_at(std::span<const float> row, int32_t token) {
  const float top = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (const float x : row) sum += std::exp(static_cast<double>(x) - top);
  return static_cast<double>(row[static_cast<size_t>(token)]) - top - std::log(sum);
}

// SnapKV's continuation measure (`strata eval kv-eviction`): a prompt of P + C tokens selecting
// at P (selection_at_tokens) scores the C tokens as if P were the prompt and they were generated
// after its one eviction. Constructed: the C tokens are the greedy continuation of P under
// SnapKV, so row P + i of the teacher-forced logits must be the distribution the decode step
// drew token i + 1 from (argmax that token, its logprob within 1e-5); rows before P are the full
// cache's, bit for bit. A budget >= P evicts nothing: every row is the full cache's (KL 0).
TEST_F(KvEvictionTokenTest, SnapKvSelectingInsideThePromptTeacherForcesTheContinuation) {
  const int32_t vocab = static_cast<int32_t>(model_.vocab_size());
  const std::vector<int32_t> prompt = prompt_of(100, 3);
  for (const KvEvictionSelection selection : {kPerHead, kShared}) {
    SCOPED_TRACE(kv_eviction_selection_name(selection));
    const Collected generated = alone(with(greedy(prompt, 21, 0), snapkv(48, selection)));
    const std::vector<int32_t>& gen = generated.tokens.at(0);
    ASSERT_EQ(gen.size(), 21u);
    EngineRequest forced = greedy(prompt, 1, -1);
    forced.prompt.insert(forced.prompt.end(), gen.begin(), gen.end() - 1);  // 120 tokens
    forced.prompt_logits = true;
    const Collected full = alone(forced);
    ASSERT_EQ(full.prompt_logits.size(), size_t{120} * vocab);

    KvEvictionParams split = snapkv(48, selection);
    split.selection_at_tokens = 100;
    const Collected got = alone(with(forced, split));
    ASSERT_EQ(got.prompt_logits.size(), full.prompt_logits.size());
    EXPECT_EQ(got.metrics.num_evicted_tokens, generated.metrics.num_evicted_tokens);
    EXPECT_EQ(got.metrics.num_evicted_tokens, 52);
    EXPECT_EQ(got.metrics.max_held_blocks, generated.metrics.max_held_blocks);
    const auto row = [&](const Collected& c, int32_t i) {
      return std::span<const float>(c.prompt_logits).subspan(static_cast<size_t>(i) * vocab, vocab);
    };
    for (int32_t i = 0; i < 100; ++i) {
      ASSERT_TRUE(std::ranges::equal(row(got, i), row(full, i))) << "prompt row " << i;
    }
    bool differs = false;
    for (int32_t i = 0; i < 20; ++i) {
      const std::span<const float> r = row(got, 100 + i);
      const int32_t next = gen[static_cast<size_t>(i) + 1];
      EXPECT_EQ(std::max_element(r.begin(), r.end()) - r.begin(), next) << "row " << 100 + i;
      const double want = generated.logprobs.at(0)[static_cast<size_t>(i) + 1].logprob;
      EXPECT_NEAR(log_softmax_at(r, next), want, 1e-5) << "row " << 100 + i;
      differs = differs || !std::ranges::equal(r, row(full, 100 + i));
    }
    EXPECT_TRUE(differs) << "the continuation reads the evicted cache, not the full one";

    KvEvictionParams roomy = split;
    roomy.budget_tokens = 100;
    const Collected kept = alone(with(forced, roomy));
    EXPECT_EQ(kept.metrics.num_evicted_tokens, 0);
    EXPECT_EQ(kept.prompt_logits, full.prompt_logits) << "a budget >= the selection point";
  }
}

TEST_F(KvEvictionTokenTest, ResultsDoNotDependOnChunksOrBatchMates) {
  for (const KvEvictionParams& p :
       {eviction(KvEvictionPolicy::kH2O, 40, 4), snapkv(40, kPerHead), snapkv(40, kShared)}) {
    SCOPED_TRACE(name_of(p));
    const EngineRequest r = with(greedy(prompt_of(90, 4), 30), p);
    const Collected got = alone(r);
    EXPECT_GT(got.metrics.num_evicted_tokens, 0);
    EngineConfig chunked;
    chunked.max_num_batched_tokens = 7;
    const Collected small_chunks = alone(r, chunked);
    expect_same(small_chunks, got);
    EXPECT_EQ(small_chunks.metrics.num_evicted_tokens, got.metrics.num_evicted_tokens);
    auto e = make();
    for (int32_t i = 0; i < 3; ++i) (void)*e->submit(greedy(prompt_of(70 + i, 10 + i), 30));
    const RequestId id = *e->submit(r);
    const Collected batched = drain(*e)[id];
    expect_same(batched, got);
    EXPECT_EQ(e->last_step().num_used_blocks, 0);
  }
}

// Greedy forks share the prompt's blocks: a fork never writes a shared block (its tokens stay),
// so each fork holds a little more than alone, and returns the same tokens. SnapKV evicts before
// the siblings fork, per head too: they start from what stayed in each head.
TEST_F(KvEvictionTokenTest, ForksNeverWriteTheBlocksTheyShare) {
  for (const KvEvictionParams& p : {eviction(KvEvictionPolicy::kH2O, 32), snapkv(32, kPerHead)}) {
    SCOPED_TRACE(name_of(p));
    EngineRequest r = with(greedy(prompt_of(70, 5), 30), p);
    const Collected one = alone(r);
    r.n = 3;
    const Collected three = alone(r);
    for (int32_t i = 0; i < 3; ++i) {
      SCOPED_TRACE("fork " + std::to_string(i));
      EXPECT_EQ(three.tokens.at(i).size(), one.tokens.at(0).size());
      EXPECT_EQ(three.tokens.at(i), three.tokens.at(0)) << "greedy forks of one state agree";
    }
    EXPECT_GT(three.metrics.num_evicted_tokens, 0);
    if (p.policy == KvEvictionPolicy::kSnapKv) {
      expect_same(three, one, 1);  // SnapKV evicted before the fork: each sibling is the one
    }
  }
}

// A token-evicting sequence compacts its blocks in place, so it neither registers its blocks in
// the prefix cache nor takes a hit: the same prompt asked again without eviction computes it
// all, and returns a cold run's tokens.
TEST_F(KvEvictionTokenTest, ATokenEvictingSequenceNeverEntersThePrefixCache) {
  auto e = make();
  const std::vector<int32_t> prompt = prompt_of(64, 6);
  const RequestId a = *e->submit(with(greedy(prompt, 20), eviction(KvEvictionPolicy::kH2O, 32)));
  drain(*e);
  (void)a;
  const RequestId b = *e->submit(greedy(prompt, 20));
  const Collected again = drain(*e)[b];
  EXPECT_EQ(again.metrics.num_cached_tokens, 0);
  expect_same(again, alone(greedy(prompt, 20)));
  // And a token-evicting request after a cached one takes no hit either.
  const RequestId c = *e->submit(with(greedy(prompt, 20), eviction(KvEvictionPolicy::kH2O, 32)));
  const Collected evicting = drain(*e)[c];
  EXPECT_EQ(evicting.metrics.num_cached_tokens, 0);
  expect_same(evicting, alone(with(greedy(prompt, 20), eviction(KvEvictionPolicy::kH2O, 32))));
  // SnapKV per head alike, both ways: after it, the prompt is a cold run; after a cached run of
  // the prompt, it takes no hit and returns what it returns alone.
  const KvEvictionParams per_head = snapkv(32, kPerHead);
  const RequestId d = *e->submit(with(greedy(prompt, 20), per_head));
  const Collected snap = drain(*e)[d];
  EXPECT_EQ(snap.metrics.num_cached_tokens, 0);
  EXPECT_GT(snap.metrics.num_evicted_tokens, 0);
  expect_same(snap, alone(with(greedy(prompt, 20), per_head)));
  const RequestId f = *e->submit(greedy(prompt, 20));
  const Collected after = drain(*e)[f];
  EXPECT_GT(after.metrics.num_cached_tokens, 0) << "the plain runs' blocks are still cached";
  expect_same(after, alone(greedy(prompt, 20)));
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

// On strata-tiny (trained: its heads attend to different tokens), SnapKV per (layer, KV head)
// and with one selection for all evict as many tokens and hold as many blocks, but keep
// different tokens, so their logprobs differ; and per head, a request's logprobs are bit-equal
// alone, beside three batch mates and in 7-token chunks.
TEST_F(KvEvictionTokenTest, SnapKvPerHeadKeepsOtherTokensThanOneSharedSelection) {
  model::Model tiny = model::Model::load({std::string(STRATA_MODELS_DIR) + "/strata-tiny"});
  const auto run = [&](const std::vector<EngineRequest>& rs, EngineConfig cfg = {}) {
    cfg.num_blocks = 128;
    auto e = engine::create_engine(tiny, pool_, cfg);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    std::vector<RequestId> ids;
    for (const EngineRequest& r : rs) ids.push_back(*(*e)->submit(r));
    auto got = drain(**e);
    EXPECT_EQ((*e)->last_step().num_used_blocks, 0) << "blocks leaked";
    return got[ids.back()];
  };
  const std::vector<int32_t> prompt = prompt_of(400, 21);
  const Collected per_head = run({with(greedy(prompt, 12), snapkv(64, kPerHead))});
  const Collected shared = run({with(greedy(prompt, 12), snapkv(64, kShared))});
  EXPECT_EQ(per_head.metrics.num_evicted_tokens, 400 - 64);
  EXPECT_EQ(shared.metrics.num_evicted_tokens, 400 - 64);
  EXPECT_EQ(per_head.metrics.max_held_blocks, shared.metrics.max_held_blocks);
  ASSERT_EQ(per_head.logprobs.at(0).size(), shared.logprobs.at(0).size());
  double largest = 0.0;
  for (size_t i = 0; i < shared.logprobs.at(0).size(); ++i) {
    largest = std::max(largest, std::fabs(double{per_head.logprobs.at(0)[i].logprob} -
                                          shared.logprobs.at(0)[i].logprob));
  }
  EXPECT_GT(largest, 1e-4) << "per head keeps other tokens than one selection for all";
  std::vector<EngineRequest> batch;
  for (int32_t i = 0; i < 3; ++i) batch.push_back(greedy(prompt_of(150 + 40 * i, 30 + i), 12));
  batch.push_back(with(greedy(prompt, 12), snapkv(64, kPerHead)));
  const Collected batched = run(batch);
  EngineConfig chunked;
  chunked.max_num_batched_tokens = 7;
  const Collected small_chunks = run({batch.back()}, chunked);
  for (const Collected* other : {&batched, &small_chunks}) {
    EXPECT_EQ(other->tokens.at(0), per_head.tokens.at(0));
    ASSERT_EQ(other->logprobs.at(0).size(), per_head.logprobs.at(0).size());
    for (size_t i = 0; i < per_head.logprobs.at(0).size(); ++i) {
      EXPECT_EQ(other->logprobs.at(0)[i].logprob, per_head.logprobs.at(0)[i].logprob)
          << "bit-equal, token " << i;
    }
  }
}

// Compaction's copies on the copy thread (the default) or on the step thread
// (EngineConfig::kv_compaction_copy_thread false) give the same bits: eight evicting requests
// (H2O, a compaction every decode step; SnapKV per head and shared, one large one) in a
// 12-block pool that preempts them by recompute and by swap, and n = 3 forks of a SnapKV request
// (they fork while its copies are in flight). No block leaks, and the step stats count the
// blocks a compaction in flight gives up as free.
TEST_F(KvEvictionTokenTest, CompactionOnTheCopyThreadGivesTheStepThreadsBits) {
  for (const KvEvictionParams& p :
       {eviction(KvEvictionPolicy::kH2O, 24, 4), snapkv(24, kPerHead), snapkv(24, kShared)}) {
    for (const PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
      SCOPED_TRACE(name_of(p) + (mode == PreemptionMode::kSwap ? " swap" : " recompute"));
      std::vector<EngineRequest> requests;
      for (int32_t i = 0; i < 8; ++i) requests.push_back(with(greedy(prompt_of(40 + i, i), 40), p));
      EngineRequest forked = with(greedy(prompt_of(60, 9), 20), p);
      forked.n = 3;
      forked.params.temperature = 1.0f;
      forked.params.seed = 5;
      requests.push_back(forked);
      std::vector<std::map<RequestId, Collected>> got;
      std::vector<std::vector<RequestId>> ids(2);
      for (const bool copy_thread : {false, true}) {
        EngineConfig c = preempting({}, mode);
        c.kv_compaction_copy_thread = copy_thread;
        auto e = make(c);
        for (const EngineRequest& r : requests) ids[got.size()].push_back(*e->submit(r));
        got.push_back(drain(*e));
        EXPECT_GT(e->totals().num_preemptions, 0);
        EXPECT_GT(e->totals().num_kv_evicted_tokens, 0);
        EXPECT_EQ(e->last_step().num_used_blocks, 0) << "blocks leaked";
      }
      for (size_t i = 0; i < requests.size(); ++i) {
        const Collected& sync = got[0][ids[0][i]];
        const Collected& async = got[1][ids[1][i]];
        EXPECT_EQ(async.metrics.num_evicted_tokens, sync.metrics.num_evicted_tokens);
        ASSERT_EQ(async.tokens, sync.tokens) << "request " << i;
        for (const auto& [seq, lps] : sync.logprobs) {
          ASSERT_EQ(async.logprobs.at(seq).size(), lps.size());
          for (size_t t = 0; t < lps.size(); ++t) {
            EXPECT_EQ(async.logprobs.at(seq)[t].logprob, lps[t].logprob) << "bit-equal";
          }
        }
      }
    }
  }
}

class KvEvictionTokenPreemptionTest : public KvEvictionTokenTest,
                                      public ::testing::WithParamInterface<PreemptionMode> {
 protected:
  // a (priority 1, evicting) decodes alone for 60 steps; then b (priority 0, no eviction)
  // outgrows the 12-block pool and a is preempted. a still returns what it gets alone, having
  // evicted more than min_evicted tokens. On strata-tiny, a trained model, whose attention is not
  // the fixtures' near-uniform one.
  void expect_late_preemption_exact(const EngineRequest& a, int32_t min_evicted) {
    model::Model tiny = model::Model::load({std::string(STRATA_MODELS_DIR) + "/strata-tiny"});
    const auto make = [&](EngineConfig cfg) {
      auto e = engine::create_engine(tiny, pool_, cfg);
      EXPECT_TRUE(e.ok()) << e.status().to_string();
      return std::move(e).value();
    };
    const auto alone = [&](const EngineRequest& r) {
      EngineConfig cfg;
      cfg.num_blocks = 64;
      auto e = make(cfg);
      const RequestId id = *e->submit(r);
      return drain(*e)[id];
    };
    EngineConfig c = engine::test_util::preempting({}, GetParam());
    c.policy = SchedulingPolicy::kPriority;
    const EngineRequest b = greedy(prompt_of(120, 12), 60);
    auto e = make(c);
    const engine::test_util::LatePreemption got = engine::test_util::preempt_late(*e, a, b);
    ASSERT_GT(got.a.metrics.num_evicted_tokens, min_evicted);
    const Collected ref = alone(a);
    expect_same(got.a, ref);
    EXPECT_EQ(got.a.metrics.num_evicted_tokens, ref.metrics.num_evicted_tokens);
    expect_same(got.b, alone(b));
  }
};

// Eight requests in a 12-block pool under H2O and SnapKV budgets preempt each other after
// evicting; each returns what it gets alone: a recompute repeats the recorded evictions at the
// same points and adds up the same attention mass again, query by query.
TEST_P(KvEvictionTokenPreemptionTest, PreemptedRequestsGetWhatTheyGetAlone) {
  for (const KvEvictionParams& policy :
       {eviction(KvEvictionPolicy::kH2O, 24, 2), snapkv(24, kPerHead), snapkv(24, kShared)}) {
    SCOPED_TRACE(name_of(policy));
    expect_preempted_requests_get_what_they_get_alone(policy, GetParam());
  }
}

// An H2O sequence preempted after many evictions: A (priority 1, budget 40) decodes alone for 60
// steps, evicting a token at each; then B (priority 0, no eviction) outgrows the 12-block pool and
// A is preempted. A still returns what it gets alone: by swap its slots' positions and mass stay
// with it, by recompute it repeats its evictions and adds up the same mass again.
// On strata-tiny, a trained model, whose attention is not the fixtures' near-uniform one.
TEST_P(KvEvictionTokenPreemptionTest, AnH2OSequencePreemptedLateGetsWhatItGetsAlone) {
  expect_late_preemption_exact(
      with(greedy(prompt_of(60, 11), 120), eviction(KvEvictionPolicy::kH2O, 40, 2, 8)), 40);
}

// SnapKV per head, preempted 60 decode steps after its one eviction: by swap each head's slot
// positions stay with it, by recompute the eviction is repeated with each head's recorded slots.
TEST_P(KvEvictionTokenPreemptionTest, ASnapKvPerHeadSequencePreemptedLateGetsWhatItGetsAlone) {
  expect_late_preemption_exact(with(greedy(prompt_of(100, 13), 120), snapkv(40, kPerHead)), 59);
}

INSTANTIATE_TEST_SUITE_P(Modes, KvEvictionTokenPreemptionTest,
                         ::testing::Values(PreemptionMode::kRecompute, PreemptionMode::kSwap),
                         engine::test_util::preemption_mode_name);

// Compaction moves a token's K and V codes and, in an int8 pool, its per-token scales: H2O over an
// int8 cache holds its budget and returns the same tokens in any chunking. (An int4 cache keeps
// per-block statistics and a newest-blocks group: refused, like every cache of two groups.)
TEST_F(KvEvictionTokenTest, RunsOverAnInt8Cache) {
  EngineConfig int8;
  int8.kv_cache_dtype = KvCacheDType::kInt8;
  const EngineRequest r =
      with(greedy(prompt_of(80, 7), 30), eviction(KvEvictionPolicy::kH2O, 32, 4));
  const Collected got = alone(r, int8);
  EXPECT_GT(got.metrics.num_evicted_tokens, 0);
  EXPECT_EQ(got.metrics.max_held_blocks, 2);
  EngineConfig chunked = int8;
  chunked.max_num_batched_tokens = 7;
  expect_same(alone(r, chunked), got);
  // SnapKV per head moves each head's codes and INT8 scales apart; FP8's scales are per layer.
  for (const KvCacheDType d : {KvCacheDType::kInt8, KvCacheDType::kFp8E4M3, KvCacheDType::kBF16}) {
    SCOPED_TRACE(kv_cache_dtype_name(d));
    EngineConfig quantized;
    quantized.kv_cache_dtype = d;
    quantized.calculate_kv_scales = d == KvCacheDType::kFp8E4M3;
    const EngineRequest s = with(greedy(prompt_of(80, 7), 30), snapkv(32, kPerHead));
    const Collected per_head = alone(s, quantized);
    EXPECT_EQ(per_head.metrics.num_evicted_tokens, 80 - 32);
    EXPECT_EQ(per_head.metrics.max_held_blocks, 4) << "after each step: 32 + 29 slots at most";
    EngineConfig small = quantized;
    small.max_num_batched_tokens = 7;
    expect_same(alone(s, small), per_head);
  }
  EngineConfig int4;
  int4.kv_cache_dtype = KvCacheDType::kInt4;
  int4.num_blocks = 64;
  auto e = engine::create_engine(model_, pool_, int4);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_FALSE((*e)->submit(r).ok());
}

}  // namespace
}  // namespace strata

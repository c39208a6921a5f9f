#pragma once
// What the token eviction engine tests share (kv_eviction_test.cc, kv_eviction_token_test.cc): a
// request's eviction fields, and a fixture over the llama3-gqa fixture model that runs requests
// alone (no block may leak) or step by step.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "model/model.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine::test_util {

inline KvEvictionParams eviction(KvEvictionPolicy policy, int32_t budget, int32_t sink = -1,
                                 int32_t window = -1) {
  return KvEvictionParams{policy, budget, sink, window};
}

inline EngineRequest with(EngineRequest r, const KvEvictionParams& e) {
  r.kv_eviction = e;
  return r;
}

// got's sequence seq returns ref's tokens, and its logprobs within 1e-5.
inline void expect_same(const Collected& got, const Collected& ref, int32_t seq = 0) {
  EXPECT_EQ(got.tokens.at(seq), ref.tokens.at(0));
  EXPECT_LE(max_top_logprobs_rel_err(got.logprobs.at(seq), ref.logprobs.at(0)), 1e-5);
}

// Test names for INSTANTIATE_TEST_SUITE_P over the preemption modes.
inline std::string preemption_mode_name(const ::testing::TestParamInfo<PreemptionMode>& i) {
  return i.param == PreemptionMode::kSwap ? "Swap" : "Recompute";
}

// The late-preemption scenario: a (priority 1, under eviction) runs alone for 60 steps; then b
// (priority 0) arrives, outgrows a small pool, and a, the lowest-ranked, is preempted. Both run
// to the end; their outputs across both phases. e: a priority-policy engine with a small pool.
struct LatePreemption {
  Collected a, b;
};
inline LatePreemption preempt_late(Engine& e, EngineRequest a, EngineRequest b) {
  a.priority = 1;
  b.priority = 0;
  const RequestId ia = *e.submit(a);
  std::map<RequestId, Collected> got;
  drain_into(e, got, 60);
  const RequestId ib = *e.submit(b);
  drain_into(e, got);
  EXPECT_GT(got[ia].metrics.num_preemptions, 0) << "a was preempted";
  EXPECT_EQ(e.last_step().num_used_blocks, 0) << "blocks leaked";
  return {got[ia], got[ib]};
}

class KvEvictionFixture : public ::testing::Test {
 protected:
  KvEvictionFixture()
      : pool_(2),
        model_(model::Model::load({std::string(STRATA_TEST_DATA_DIR) + "/models/llama3-gqa"})) {}

  // An engine of 256 blocks unless c names its pool.
  std::unique_ptr<Engine> make(EngineConfig c = {}) {
    if (c.num_blocks == 0) c.num_blocks = 256;
    auto e = create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  Collected alone(const EngineRequest& r, const EngineConfig& c = {}) {
    auto e = make(c);
    const RequestId id = *e->submit(r);
    Collected got = drain(*e)[id];
    EXPECT_EQ(e->last_step().num_used_blocks, 0) << "blocks leaked";
    return got;
  }

  // Runs one request step by step; the pool's used blocks after each step (the request's own:
  // nothing else runs and the prefix cache holds only free blocks).
  std::vector<int32_t> used_blocks_per_step(const EngineRequest& r, Collected* out = nullptr) {
    auto e = make();
    (void)*e->submit(r);
    std::vector<int32_t> used;
    Collected c;
    while (e->has_unfinished()) {
      auto step = e->step();
      EXPECT_TRUE(step.ok());
      if (!step.ok()) break;
      used.push_back(e->last_step().num_used_blocks);
      for (const RequestOutput& o : *step) absorb(c, o);
    }
    if (out != nullptr) *out = c;
    EXPECT_EQ(e->last_step().num_used_blocks, 0) << "blocks leaked";
    return used;
  }

  // Eight requests of 40-47 prompt tokens and 48 output tokens under `policy` in a 12-block pool
  // preempt each other (by `mode`) after evicting; each returns what it gets alone, and evicts
  // as many blocks and tokens. No block leaks.
  void expect_preempted_requests_get_what_they_get_alone(const KvEvictionParams& policy,
                                                         PreemptionMode mode) {
    auto e = make(preempting({}, mode));
    std::vector<EngineRequest> requests;
    std::vector<RequestId> ids;
    for (int32_t i = 0; i < 8; ++i) {
      requests.push_back(with(greedy(prompt_of(40 + i, i), 48), policy));
      ids.push_back(*e->submit(requests.back()));
    }
    auto got = drain(*e);
    EXPECT_GT(e->totals().num_preemptions, 0);
    EXPECT_GT(e->totals().num_kv_evicted_blocks + e->totals().num_kv_evicted_tokens, 0);
    EXPECT_EQ(e->last_step().num_used_blocks, 0) << "blocks leaked";
    int evicted_and_preempted = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      const Collected ref = alone(requests[i]);
      const Collected& x = got[ids[i]];
      expect_same(x, ref);
      EXPECT_EQ(x.metrics.num_evicted_blocks, ref.metrics.num_evicted_blocks);
      EXPECT_EQ(x.metrics.num_evicted_tokens, ref.metrics.num_evicted_tokens);
      evicted_and_preempted += x.metrics.num_preemptions > 0 &&
                               x.metrics.num_evicted_blocks + x.metrics.num_evicted_tokens > 0;
    }
    EXPECT_GT(evicted_and_preempted, 0);
  }

  ThreadPool pool_;
  model::Model model_;
};

}  // namespace strata::engine::test_util

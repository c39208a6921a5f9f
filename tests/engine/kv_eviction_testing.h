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

  ThreadPool pool_;
  model::Model model_;
};

}  // namespace strata::engine::test_util

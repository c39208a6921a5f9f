#include "bench/driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "bench/synthetic_workloads.h"
#include "core/error.h"
#include "fake_engine.h"

namespace strata::bench {
namespace {

using testing::FakeEngine;
using testing::ManualClock;

BenchRequest request(std::vector<int32_t> tokens, int32_t output_len, double arrival = 0.0) {
  BenchRequest r;
  r.planned_prompt_len = static_cast<int32_t>(tokens.size());
  r.tokens = std::move(tokens);
  r.output_len = output_len;
  r.arrival_s = arrival;
  return r;
}

Workload workload(std::vector<BenchRequest> requests) {
  Workload w;
  w.name = "test";
  w.requests = std::move(requests);
  return w;
}

// Agentic sessions of 3 turns each (8-token system prompt, 4-6 new tokens and 2-3 output tokens
// a turn, 0.5 s of thinking between turns).
Workload sessions_of_three_turns(int32_t num_sessions) {
  return make_agentic_workload({.num_sessions = num_sessions,
                                .turns = {3, 3},
                                .system_prompt_len = 8,
                                .turn_input_len = {4, 6},
                                .turn_output_len = {2, 3},
                                .think_s = 0.5},
                               {.vocab_size = 50, .max_model_len = 1000, .seed = 2});
}

TEST(DriverTest, OfflineSubmitsEverythingAtOnceAndTimesEveryToken) {
  ManualClock clock;
  FakeEngine engine(clock);
  const Workload w = workload({request({1, 2}, 2), request({3}, 3), request({4, 5, 6}, 4)});
  const RunResult r = run_workload(w, engine, clock, {});
  ASSERT_EQ(r.requests.size(), 3u);
  for (const auto& [id, s] : engine.submitted) EXPECT_EQ(s.time, 100.0);
  for (size_t i = 0; i < 3; ++i) {
    const RequestRecord& q = r.requests[i];
    EXPECT_EQ(q.submit_s, 0.0);
    EXPECT_NEAR(q.first_token_s, 0.01, 1e-9);
    EXPECT_EQ(q.num_output_tokens, q.output_len);
    EXPECT_NEAR(q.finish_s, 0.01 * q.output_len, 1e-9);
  }
  EXPECT_NEAR(r.duration_s, 0.04, 1e-9);
  EXPECT_EQ(r.num_output_tokens, 9);
  EXPECT_EQ(r.num_prompt_tokens, 6);
  // Gaps after each first token: 1 + 2 + 3, all one step long.
  ASSERT_EQ(r.inter_token_s.size(), 6u);
  for (const double g : r.inter_token_s) EXPECT_NEAR(g, 0.01, 1e-9);
  EXPECT_EQ(r.steps.size(), 4u);
  EXPECT_EQ(r.steps[0].num_scheduled_seqs, 3);
}

TEST(DriverTest, OnlineArrivalsWaitForTheirTime) {
  ManualClock clock;
  FakeEngine engine(clock);
  const Workload w = workload({request({1}, 2, 0.0), request({2}, 2, 1.0)});
  const RunResult r = run_workload(w, engine, clock, {});
  // The second request arrives long after the first finished: the driver slept until 1.0.
  EXPECT_NEAR(r.requests[1].submit_s, 1.0, 1e-9);
  EXPECT_NEAR(r.requests[1].first_token_s - r.requests[1].arrival_s, 0.01, 1e-9);
  EXPECT_NEAR(r.duration_s, 1.02, 1e-9);
}

TEST(DriverTest, LatenciesCountFromArrivalEvenWhenQueued) {
  ManualClock clock;
  FakeEngine engine(clock);
  engine.max_running = 1;
  const Workload w = workload({request({1}, 3), request({2}, 3)});
  const RunResult r = run_workload(w, engine, clock, {});
  // The second waits three steps for the first, then one step for its first token.
  EXPECT_NEAR(r.requests[1].first_token_s - r.requests[1].arrival_s, 0.04, 1e-9);
  EXPECT_NEAR(r.requests[1].finish_s, 0.06, 1e-9);
}

TEST(DriverTest, SessionTurnsExtendThePreviousPromptWithItsRealOutput) {
  ManualClock clock;
  FakeEngine engine(clock);
  const Workload w = sessions_of_three_turns(2);
  ASSERT_EQ(w.requests.size(), 6u);
  const RunResult r = run_workload(w, engine, clock, {.block_size = 4});
  ASSERT_EQ(engine.submitted.size(), 6u);
  // The engine's submission of request i: the prompt of its recorded length ending in its new
  // tokens (the tokens are random, so this is unique).
  const auto submission = [&](size_t i) -> std::pair<uint64_t, const FakeEngine::Submitted*> {
    const std::vector<int32_t>& tail = w.requests[i].tokens;
    for (const auto& [id, s] : engine.submitted) {
      if (static_cast<int32_t>(s.prompt.size()) == r.requests[i].prompt_len &&
          std::equal(tail.begin(), tail.end(),
                     s.prompt.end() - static_cast<ptrdiff_t>(tail.size()))) {
        return {id, &s};
      }
    }
    return {0, nullptr};
  };
  for (size_t i = 0; i < 6; ++i) {
    const BenchRequest& q = w.requests[i];
    const auto [id, sub] = submission(i);
    ASSERT_NE(sub, nullptr) << i;
    EXPECT_EQ(r.requests[i].prompt_len, q.planned_prompt_len);
    if (q.turn_idx == 0) {
      EXPECT_EQ(sub->prompt, q.tokens);
      continue;
    }
    // prompt = previous prompt + what the engine generated for it + the new tokens
    const auto [prev_id, prev] = submission(i - 1);
    std::vector<int32_t> expected = prev->prompt;
    for (int32_t k = 0; k < w.requests[i - 1].output_len; ++k) {
      expected.push_back(static_cast<int32_t>(prev_id * 100 + k));
    }
    expected.insert(expected.end(), q.tokens.begin(), q.tokens.end());
    EXPECT_EQ(sub->prompt, expected) << "request " << i;
    // Sent only after the previous turn finished plus the think time.
    EXPECT_NEAR(r.requests[i].arrival_s, r.requests[i - 1].finish_s + 0.5, 1e-9);
    EXPECT_NEAR(sub->time - 100.0, r.requests[i].arrival_s, 1e-9);
  }
  // Everything but the new tokens of later turns (and block tails) was cacheable.
  EXPECT_GT(r.cacheable.share(), 0.3);
  EXPECT_EQ(r.cacheable.prompt_tokens, r.num_prompt_tokens);
}

TEST(DriverTest, CacheableShareCountsSharedPrefixesInSubmissionOrder) {
  ManualClock clock;
  FakeEngine engine(clock);
  const Workload w = workload(
      {request({1, 2, 3, 4, 5}, 1), request({1, 2, 3, 4, 6, 7}, 1), request({9, 9, 9}, 1)});
  const RunResult r = run_workload(w, engine, clock, {.block_size = 2});
  EXPECT_EQ(r.cacheable.prompt_tokens, 14);
  EXPECT_EQ(r.cacheable.cacheable_tokens, 4);  // [1 2][3 4] of the second prompt
}

TEST(DriverTest, WrongOutputLengthIsAnErrorUnlessEosIsAllowed) {
  {
    ManualClock clock;
    FakeEngine engine(clock);
    engine.stop_after = 2;
    const Workload w = workload({request({1}, 2), request({2}, 5)});
    try {
      run_workload(w, engine, clock, {});
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "request 1: asked for 5 output tokens, got 2");
    }
  }
  ManualClock clock;
  FakeEngine engine(clock);
  engine.stop_after = 2;
  const Workload w = workload({request({1}, 2), request({2}, 5)});
  const RunResult r = run_workload(w, engine, clock, {.ignore_eos = false});
  EXPECT_EQ(r.num_stopped_early, 1);
  EXPECT_EQ(r.requests[1].num_output_tokens, 2);
}

TEST(DriverTest, RefusedRequestIsAnErrorNamingIt) {
  ManualClock clock;
  FakeEngine engine(clock);
  engine.refuse_longer_than = 2;
  Workload w = workload({request({1}, 1), request({1, 2, 3}, 1)});
  w.requests[1].source_line = 9;
  try {
    run_workload(w, engine, clock, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "trace line 9: the engine refused it: prompt too long")
        << e.what();
  }
}

TEST(DriverTest, AFailedRequestIsCountedAndTheRunGoesOn) {
  ManualClock clock;
  FakeEngine engine(clock);
  engine.fail_after = {{2, 0}, {3, 1}};  // ids in submission order: requests 1 and 2
  Workload w = workload({request({1}, 2), request({2}, 2), request({3}, 3), request({4}, 2)});
  w.requests[1].source_line = 7;
  const RunResult r = run_workload(w, engine, clock, {});
  EXPECT_EQ(r.num_failed, 2);
  EXPECT_EQ(r.first_failure, "trace line 7: HTTP 400: refused");
  EXPECT_FALSE(r.requests[0].failed);
  EXPECT_TRUE(r.requests[1].failed);
  EXPECT_TRUE(r.requests[2].failed);
  EXPECT_EQ(r.requests[2].num_output_tokens, 1) << "what came before the failure is counted";
  EXPECT_FALSE(r.requests[3].failed);
  EXPECT_EQ(r.requests[3].num_output_tokens, 2);
  EXPECT_EQ(r.num_output_tokens, 5);
}

TEST(DriverTest, ASessionGoesOnAfterAFailedTurn) {
  ManualClock clock;
  FakeEngine engine(clock);
  const Workload w = sessions_of_three_turns(1);
  engine.fail_after = {{2, 0}};  // the second turn gets nothing
  const RunResult r = run_workload(w, engine, clock, {});
  ASSERT_EQ(engine.submitted.size(), 3u);
  EXPECT_EQ(r.num_failed, 1);
  EXPECT_TRUE(r.requests[1].failed);
  // The third turn: the first's prompt and output, the second's new tokens (it answered
  // nothing), then its own.
  std::vector<int32_t> expected = engine.submitted[1].prompt;
  for (int32_t k = 0; k < w.requests[0].output_len; ++k) expected.push_back(100 + k);
  expected.insert(expected.end(), w.requests[1].tokens.begin(), w.requests[1].tokens.end());
  expected.insert(expected.end(), w.requests[2].tokens.begin(), w.requests[2].tokens.end());
  EXPECT_EQ(engine.submitted[3].prompt, expected);
}

TEST(DriverTest, AStalledEngineIsAnErrorNotAHang) {
  ManualClock clock;
  FakeEngine engine(clock);
  engine.stuck = true;
  DriverOptions o;
  o.stall_timeout_s = 2.0;
  try {
    run_workload(workload({request({1}, 1)}), engine, clock, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ran nothing for"), std::string::npos) << e.what();
  }
  EXPECT_GT(clock.t - 100.0, 2.0);
  EXPECT_LT(clock.t - 100.0, 2.01);
}

TEST(DriverTest, ProgressIsReportedEveryStep) {
  ManualClock clock;
  FakeEngine engine(clock);
  int calls = 0;
  Progress last;
  DriverOptions o;
  o.on_progress = [&](const Progress& p) {
    ++calls;
    last = p;
  };
  run_workload(workload({request({1}, 3)}), engine, clock, o);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(last.num_finished, 1);
  EXPECT_EQ(last.num_output_tokens, 3);
}

}  // namespace
}  // namespace strata::bench

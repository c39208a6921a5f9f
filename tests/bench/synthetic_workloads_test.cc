#include "bench/synthetic_workloads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "core/error.h"

namespace strata::bench {
namespace {

WorkloadLimits limits(int64_t max_model_len = 1 << 20, uint64_t seed = 1) {
  return {.vocab_size = 1000, .max_model_len = max_model_len, .seed = seed};
}

double mean_of(const Workload& w, bool input) {
  double s = 0;
  for (const BenchRequest& r : w.requests) s += input ? r.planned_prompt_len : r.output_len;
  return s / static_cast<double>(w.requests.size());
}

TEST(LengthRangeTest, ParsesFixedAndRangedLengths) {
  EXPECT_EQ(parse_length_range("128", "--input-len").min, 128);
  EXPECT_EQ(parse_length_range("128", "--input-len").max, 128);
  const LengthRange r = parse_length_range("16:64", "--input-len");
  EXPECT_EQ(r.min, 16);
  EXPECT_EQ(r.max, 64);
}

TEST(LengthRangeTest, RejectsMalformedRangesNamingTheFlag) {
  for (const char* bad : {"", "x", "0", "-3", "5:2", "1:", ":4", "3.5", "1:2:3", "99999999999"}) {
    try {
      parse_length_range(bad, "--output-len");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--output-len"), std::string::npos) << e.what();
    }
  }
}

TEST(RandomWorkloadTest, SameSeedSameRequestsOtherSeedOtherTokens) {
  RandomWorkloadConfig c{.num_prompts = 20, .input_len = {10, 50}, .output_len = {1, 9}};
  const Workload a = make_random_workload(c, limits(1 << 20, 7));
  const Workload b = make_random_workload(c, limits(1 << 20, 7));
  const Workload other = make_random_workload(c, limits(1 << 20, 8));
  ASSERT_EQ(a.requests.size(), 20u);
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].tokens, b.requests[i].tokens);
    EXPECT_EQ(a.requests[i].output_len, b.requests[i].output_len);
  }
  EXPECT_NE(a.requests[0].tokens, other.requests[0].tokens);
}

TEST(RandomWorkloadTest, LengthsStayInRangeWithUniformMeans) {
  RandomWorkloadConfig c{.num_prompts = 4000, .input_len = {100, 300}, .output_len = {10, 30}};
  const Workload w = make_random_workload(c, limits());
  std::set<int32_t> seen;
  for (const BenchRequest& r : w.requests) {
    ASSERT_GE(r.planned_prompt_len, 100);
    ASSERT_LE(r.planned_prompt_len, 300);
    ASSERT_EQ(static_cast<int32_t>(r.tokens.size()), r.planned_prompt_len);
    ASSERT_GE(r.output_len, 10);
    ASSERT_LE(r.output_len, 30);
    seen.insert(r.output_len);
    for (const int32_t t : r.tokens) ASSERT_TRUE(t >= 0 && t < 1000);
  }
  EXPECT_EQ(seen.size(), 21u);                // both ends reached
  EXPECT_NEAR(mean_of(w, true), 200.0, 3.0);  // sd of the mean: 58 / sqrt(4000) = 0.9
  EXPECT_NEAR(mean_of(w, false), 20.0, 0.3);
}

TEST(RandomWorkloadTest, SharedPrefixStartsEveryPrompt) {
  RandomWorkloadConfig c{
      .num_prompts = 5, .input_len = {8, 8}, .output_len = {4, 4}, .prefix_len = 32};
  const Workload w = make_random_workload(c, limits());
  for (const BenchRequest& r : w.requests) {
    ASSERT_EQ(r.tokens.size(), 40u);
    EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.begin() + 32, w.requests[0].tokens.begin()));
  }
  EXPECT_NE(w.requests[0].tokens, w.requests[1].tokens);
}

TEST(RandomWorkloadTest, LengthsBeyondMaxModelLenAreAnError) {
  RandomWorkloadConfig c{.num_prompts = 1, .input_len = {1000, 1000}, .output_len = {100, 100}};
  EXPECT_THROW(make_random_workload(c, limits(1024)), Error);
}

TEST(ShareGptWorkloadTest, LogNormalMeansMatchTheParameters) {
  ShareGptWorkloadConfig c{.num_prompts = 20000};
  const Workload w = make_sharegpt_workload(c, limits());
  // mean = median * exp(sigma^2 / 2): 161.3 and 338.0; the sample mean's sd is about 1.5 and 2.
  EXPECT_NEAR(mean_of(w, true), 161.31, 8.0);
  EXPECT_NEAR(mean_of(w, false), 337.99, 10.0);
  // The median of a log-normal is exp(mu).
  std::vector<int32_t> in;
  for (const BenchRequest& r : w.requests) in.push_back(r.planned_prompt_len);
  std::nth_element(in.begin(), in.begin() + in.size() / 2, in.end());
  EXPECT_NEAR(in[in.size() / 2], 97.84, 3.0);
}

TEST(ShareGptWorkloadTest, ClampsToMaxModelLenAndScales) {
  ShareGptWorkloadConfig c{.num_prompts = 2000, .length_scale = 0.5};
  const Workload w = make_sharegpt_workload(c, limits(256));
  int clamped = 0;
  for (const BenchRequest& r : w.requests) {
    ASSERT_GE(r.output_len, 1);
    ASSERT_GE(r.planned_prompt_len, 1);
    ASSERT_LE(r.planned_prompt_len + r.output_len, 256);
    clamped += r.planned_prompt_len + r.output_len == 256;
  }
  EXPECT_GT(clamped, 0);  // the long tail reaches the limit
  const Workload full = make_sharegpt_workload({.num_prompts = 2000}, limits());
  EXPECT_LT(mean_of(w, true), 0.6 * mean_of(full, true));
}

TEST(AgenticWorkloadTest, EachTurnExtendsThePreviousWithinItsSession) {
  AgenticWorkloadConfig c{.num_sessions = 3,
                          .turns = {4, 4},
                          .system_prompt_len = 64,
                          .turn_input_len = {10, 20},
                          .turn_output_len = {2, 5}};
  const Workload w = make_agentic_workload(c, limits());
  ASSERT_EQ(w.requests.size(), 12u);
  EXPECT_EQ(w.num_sessions, 3);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const BenchRequest& r = w.requests[i];
    EXPECT_EQ(r.session_idx, static_cast<int64_t>(i / 4));
    EXPECT_EQ(r.turn_idx, static_cast<int32_t>(i % 4));
    if (r.turn_idx == 0) {
      EXPECT_FALSE(r.extends_previous);
      // The shared system prefix opens every session.
      EXPECT_TRUE(
          std::equal(r.tokens.begin(), r.tokens.begin() + 64, w.requests[0].tokens.begin()));
      EXPECT_EQ(static_cast<int32_t>(r.tokens.size()), r.planned_prompt_len);
    } else {
      const BenchRequest& prev = w.requests[i - 1];
      EXPECT_TRUE(r.extends_previous);
      EXPECT_GE(r.tokens.size(), 10u);
      EXPECT_LE(r.tokens.size(), 20u);
      // prompt = previous prompt + previous output + new tokens
      EXPECT_EQ(r.planned_prompt_len,
                prev.planned_prompt_len + prev.output_len + static_cast<int32_t>(r.tokens.size()));
    }
  }
  EXPECT_NE(w.requests[0].tokens, w.requests[4].tokens);  // sessions differ after the prefix
}

TEST(AgenticWorkloadTest, SessionsStopBeforeTheContextLimit) {
  AgenticWorkloadConfig c{.num_sessions = 4,
                          .turns = {50, 50},
                          .system_prompt_len = 100,
                          .turn_input_len = {50, 100},
                          .turn_output_len = {5, 10}};
  const Workload w = make_agentic_workload(c, limits(1000));
  for (const BenchRequest& r : w.requests) ASSERT_LE(r.planned_prompt_len + r.output_len, 1000);
  EXPECT_LT(w.requests.size(), 4u * 50u);
  EXPECT_GE(w.requests.size(), 4u * 5u);
}

TEST(AgenticWorkloadTest, LengthScaleShrinksEveryLength) {
  AgenticWorkloadConfig c{.num_sessions = 2, .turns = {3, 3}, .length_scale = 0.01};
  const Workload w = make_agentic_workload(c, limits(4096));
  ASSERT_EQ(w.requests.size(), 6u);
  // system 2000 x 0.01 = 20; new tokens 2..38; outputs 1..5.
  for (const BenchRequest& r : w.requests) {
    EXPECT_GE(r.output_len, 1);
    EXPECT_LE(r.output_len, 5);
    if (r.turn_idx > 0) {
      EXPECT_LE(r.tokens.size(), 38u);
    }
  }
  EXPECT_GE(w.requests[0].tokens.size(), 22u);
  EXPECT_LE(w.requests[0].tokens.size(), 58u);
}

TEST(AgenticWorkloadTest, AFirstTurnBeyondTheLimitIsAnError) {
  EXPECT_THROW(make_agentic_workload({.num_sessions = 1}, limits(1024)), Error);
}

TEST(PoissonArrivalsTest, SeededWithTheRequestedRate) {
  Workload w = make_random_workload(
      {.num_prompts = 5000, .input_len = {4, 4}, .output_len = {1, 1}}, limits());
  assign_poisson_arrivals(w, 50.0, 3);
  EXPECT_TRUE(w.has_arrival_times);
  double prev = 0;
  for (const BenchRequest& r : w.requests) {
    ASSERT_GE(r.arrival_s, prev);
    prev = r.arrival_s;
  }
  EXPECT_NEAR(prev / 5000.0, 1.0 / 50.0, 0.001);  // mean gap 20 ms; sd of the mean 0.28 ms
  Workload again = w;
  assign_poisson_arrivals(again, 50.0, 3);
  EXPECT_EQ(again.requests[77].arrival_s, w.requests[77].arrival_s);
  assign_poisson_arrivals(again, std::numeric_limits<double>::infinity(), 3);
  EXPECT_FALSE(again.has_arrival_times);
  EXPECT_EQ(again.requests.back().arrival_s, 0.0);
}

TEST(PoissonArrivalsTest, OnlyFirstTurnsOfSessionsGetArrivals) {
  Workload w = make_agentic_workload({.num_sessions = 3,
                                      .turns = {2, 2},
                                      .system_prompt_len = 4,
                                      .turn_input_len = {4, 4},
                                      .turn_output_len = {1, 1}},
                                     limits());
  assign_poisson_arrivals(w, 10.0, 1);
  EXPECT_GT(w.requests[0].arrival_s, 0.0);
  EXPECT_EQ(w.requests[1].arrival_s, 0.0);
  EXPECT_GT(w.requests[2].arrival_s, w.requests[0].arrival_s);
}

TEST(ValidateWorkloadTest, NamesTheOffendingRequest) {
  Workload w =
      make_random_workload({.num_prompts = 3, .input_len = {4, 4}, .output_len = {2, 2}}, limits());
  EXPECT_NO_THROW(validate_workload(w, 6, 1000));
  try {
    validate_workload(w, 5, 1000);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 0"), std::string::npos) << e.what();
  }
  w.requests[2].tokens[1] = 1000;
  EXPECT_THROW(validate_workload(w, 6, 1000), Error);
}

}  // namespace
}  // namespace strata::bench

#include "bench/trace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace strata::bench {
namespace {

WorkloadLimits trace_limits(int64_t max_model_len = 1 << 16) {
  return {.vocab_size = 1000, .max_model_len = max_model_len, .seed = 5};
}

Workload build(const std::string& text, TraceBuildConfig config = {},
               WorkloadLimits l = trace_limits()) {
  return build_trace_workload(parse_trace_text(text, "t.jsonl"), config, l);
}

TEST(TraceParserTest, ReadsEveryField) {
  const auto records = parse_trace_text(
      "{\"timestamp\": 1500, \"session_id\": \"a\", \"input_length\": 7, \"output_length\": 3, "
      "\"priority\": -2}\n"
      "\n"
      "{\"timestamp\": 2000.5, \"session_id\": 42, \"input_ids\": [1, 2, 3], \"output_length\": 1, "
      "\"extra\": true}\r\n",
      "t.jsonl");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].line, 1);
  EXPECT_DOUBLE_EQ(*records[0].arrival_s, 1.5);
  EXPECT_EQ(*records[0].session_id, "a");
  EXPECT_EQ(*records[0].input_length, 7);
  EXPECT_EQ(records[0].output_length, 3);
  EXPECT_EQ(records[0].priority, -2);
  EXPECT_EQ(records[1].line, 3);
  EXPECT_DOUBLE_EQ(*records[1].arrival_s, 2.0005);
  EXPECT_EQ(*records[1].session_id, "42");
  EXPECT_EQ(records[1].input_ids, (std::vector<int32_t>{1, 2, 3}));
}

// Every malformed line is rejected with the line number and a message saying what is wrong.
TEST(TraceParserTest, RejectsEveryMalformedLineWithItsLineAndReason) {
  const std::string good = "{\"input_length\": 4, \"output_length\": 2}\n";
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"not json", "not valid JSON"},
      {"{\"input_length\": 4, \"output_length\": 2", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"input_length\": 4}", "missing output_length"},
      {"{\"output_length\": 2}", "missing the prompt"},
      {"{\"input_length\": 4, \"output_length\": 0}", "output_length must be an integer in"},
      {"{\"input_length\": 4, \"output_length\": -1}", "output_length must be an integer in"},
      {"{\"input_length\": 4, \"output_length\": 2.5}", "output_length must be an integer"},
      {"{\"input_length\": 4, \"output_length\": \"2\"}", "output_length must be an integer"},
      {"{\"input_length\": 4, \"output_length\": true}", "output_length must be an integer"},
      {"{\"input_length\": 4, \"output_length\": 99999999999}",
       "output_length must be an integer in"},
      {"{\"input_length\": 0, \"output_length\": 2}", "input_length must be an integer in"},
      {"{\"input_length\": 18446744073709551615, \"output_length\": 2}", "input_length must be"},
      {"{\"input_ids\": [], \"output_length\": 2}", "input_ids must be a non-empty array"},
      {"{\"input_ids\": \"1,2\", \"output_length\": 2}", "input_ids must be a non-empty array"},
      {"{\"input_ids\": [1, -2], \"output_length\": 2}", "each of input_ids must be"},
      {"{\"input_ids\": [1, 2], \"input_length\": 3, \"output_length\": 2}", "differs from the 2"},
      {"{\"hash_ids\": [1], \"output_length\": 2}", "hash_ids needs input_length"},
      {"{\"hash_ids\": [], \"input_length\": 4, \"output_length\": 2}", "hash_ids must be"},
      {"{\"hash_ids\": [1, \"x\"], \"input_length\": 4, \"output_length\": 2}", "each of hash_ids"},
      {"{\"hash_ids\": [1], \"input_ids\": [1], \"input_length\": 1, \"output_length\": 2}",
       "not both"},
      {"{\"timestamp\": 1, \"arrival_time\": 1, \"input_length\": 4, \"output_length\": 2}",
       "not both"},
      {"{\"timestamp\": -5, \"input_length\": 4, \"output_length\": 2}", "finite number >= 0"},
      // Arrivals no replay can wait for: fail at parse time instead of sleeping for ever.
      {"{\"arrival_time\": 1e308, \"input_length\": 4, \"output_length\": 2}",
       "arrival_time 1e+308 is past year 2286"},
      {"{\"timestamp\": 1.7e16, \"input_length\": 4, \"output_length\": 2}",  // microseconds
       "timestamp 1.7e+16 is past year 2286"},
      // Past a double's range: nlohmann's out_of_range, not its parse_error (found by trace_fuzz).
      {"{\"arrival_time\": 2e308, \"input_length\": 4, \"output_length\": 2}",
       "not valid JSON: [json.exception.out_of_range.406] number overflow"},
      {"{\"x\": " + std::string(100'000, '[') + std::string(100'000, ']') + "}",
       "not valid JSON: arrays and objects nest deeper than 128 levels"},
      {"{\"timestamp\": \"5\", \"input_length\": 4, \"output_length\": 2}", "must be a number"},
      {"{\"session_id\": [1], \"input_length\": 4, \"output_length\": 2}", "session_id must be"},
      {"{\"priority\": 1.5, \"input_length\": 4, \"output_length\": 2}", "priority must be"},
      {"{\"priority\": 3000000000, \"input_length\": 4, \"output_length\": 2}", "priority must be"},
  };
  for (const Case& c : cases) {
    try {
      parse_trace_text(good + c.line + "\n", "t.jsonl");
      ADD_FAILURE() << "accepted: " << c.line;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("t.jsonl line 2: ", 0), 0u) << what;
      EXPECT_NE(what.find(c.message), std::string::npos) << c.line << " -> " << what;
    }
  }
}

TEST(TraceParserTest, RejectsInconsistentArrivalTimesAndEmptyTraces) {
  EXPECT_THROW(parse_trace_text("", "t"), Error);
  EXPECT_THROW(parse_trace_text("\n  \n", "t"), Error);
  const std::string a = "{\"timestamp\": 10, \"input_length\": 4, \"output_length\": 2}\n";
  const std::string b = "{\"timestamp\": 5, \"input_length\": 4, \"output_length\": 2}\n";
  const std::string none = "{\"input_length\": 4, \"output_length\": 2}\n";
  try {
    parse_trace_text(a + b, "t");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2: arrival time goes back"), std::string::npos);
  }
  EXPECT_THROW(parse_trace_text(a + none, "t"), Error);
  EXPECT_THROW(parse_trace_text(none + a, "t"), Error);
  EXPECT_NO_THROW(parse_trace_text(b + a, "t"));
}

TEST(TraceParserTest, ATraceSpansAtMostAWeek) {
  const std::string first = "{\"arrival_time\": 100, \"input_length\": 4, \"output_length\": 2}\n";
  EXPECT_NO_THROW(parse_trace_text(
      first + "{\"arrival_time\": 604900, \"input_length\": 4, \"output_length\": 2}\n", "t"));
  try {
    parse_trace_text(
        first + "{\"arrival_time\": 691300, \"input_length\": 4, \"output_length\": 2}\n", "t");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t line 2: arrives 8.0 days after line 1: a trace may "
                                         "span at most a week"),
              std::string::npos)
        << e.what();
  }
}

TEST(TraceParserTest, MissingFileIsAnError) {
  EXPECT_THROW(load_trace("/nonexistent/trace.jsonl"), Error);
}

// Mooncake: equal hash ids give equal token blocks, different ids different blocks, and the
// partial last block is a prefix of its id's block.
TEST(TraceWorkloadTest, MooncakeHashIdsShareBlocksExactlyWhereIdsRepeat) {
  const Workload w = build(
      "{\"timestamp\": 0, \"input_length\": 1500, \"output_length\": 5, \"hash_ids\": [10, 11, "
      "12]}\n"
      "{\"timestamp\": 250, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [10, 11, "
      "13]}\n"
      "{\"timestamp\": 500, \"input_length\": 512, \"output_length\": 5, \"hash_ids\": [12]}\n");
  ASSERT_EQ(w.requests.size(), 3u);
  EXPECT_TRUE(w.has_arrival_times);
  EXPECT_DOUBLE_EQ(w.requests[1].arrival_s, 0.25);
  const auto& a = w.requests[0].tokens;
  const auto& b = w.requests[1].tokens;
  const auto& c = w.requests[2].tokens;
  ASSERT_EQ(a.size(), 1500u);
  ASSERT_EQ(b.size(), 1100u);
  ASSERT_EQ(c.size(), 512u);
  const auto block = [](const std::vector<int32_t>& t, size_t i, size_t len = 512) {
    return std::vector<int32_t>(t.begin() + i * 512, t.begin() + i * 512 + len);
  };
  EXPECT_EQ(block(a, 0), block(b, 0));            // id 10
  EXPECT_EQ(block(a, 1), block(b, 1));            // id 11
  EXPECT_NE(block(a, 2, 76), block(b, 2, 76));    // 12 vs 13
  EXPECT_EQ(block(a, 2, 476), block(c, 0, 476));  // id 12: a's partial block is c's prefix
  EXPECT_NE(block(a, 0), block(a, 1));            // 10 vs 11
}

TEST(TraceWorkloadTest, TraceBlockSizeScalesMooncakeLengths) {
  const Workload w = build(
      "{\"input_length\": 1500, \"output_length\": 64, \"hash_ids\": [1, 2, 3]}\n"
      "{\"input_length\": 1030, \"output_length\": 64, \"hash_ids\": [1, 2, 4]}\n"
      "{\"input_length\": 40, \"output_length\": 64}\n",
      {.block_size = 16, .output_scale = 0.25});
  // 2 full blocks of 16 + ceil(476 * 16 / 512) = 15.
  EXPECT_EQ(w.requests[0].tokens.size(), 47u);
  EXPECT_EQ(w.requests[1].tokens.size(), 33u);  // 32 + ceil(6 * 16 / 512) = 1
  EXPECT_EQ(w.requests[2].tokens.size(), 2u);   // ceil(40 / 32)
  EXPECT_EQ(w.requests[0].output_len, 16);
  EXPECT_TRUE(std::equal(w.requests[0].tokens.begin(), w.requests[0].tokens.begin() + 32,
                         w.requests[1].tokens.begin()));
  EXPECT_FALSE(w.has_arrival_times);
}

TEST(TraceWorkloadTest, HashIdCountMustMatchTheInputLength) {
  for (const char* line : {"{\"input_length\": 1500, \"output_length\": 1, \"hash_ids\": [1, 2]}",
                           "{\"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1, 2]}"}) {
    try {
      build(std::string("{\"input_length\": 4, \"output_length\": 2}\n") + line);
      ADD_FAILURE() << line;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("trace line 2: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("hash_ids"), std::string::npos) << e.what();
    }
  }
}

TEST(TraceWorkloadTest, LengthsBeyondTheModelAreRejectedBeforeTokensAreMade) {
  try {
    build("{\"input_length\": 1000000000, \"output_length\": 1}\n", {}, trace_limits(4096));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trace line 1: prompt 1000000000 + output 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(TraceWorkloadTest, SessionTurnsContinueWhenLonger) {
  const Workload w = build(
      "{\"session_id\": \"s\", \"input_length\": 100, \"output_length\": 10}\n"
      "{\"session_id\": \"t\", \"input_length\": 50, \"output_length\": 5}\n"
      "{\"session_id\": \"s\", \"input_length\": 130, \"output_length\": 10}\n"
      "{\"session_id\": \"s\", \"input_length\": 20, \"output_length\": 10}\n",
      {.think_s = 0.5});
  ASSERT_EQ(w.requests.size(), 4u);
  EXPECT_EQ(w.num_sessions, 2);
  EXPECT_EQ(w.requests[0].session_idx, 0);
  EXPECT_EQ(w.requests[1].session_idx, 1);
  EXPECT_EQ(w.requests[2].session_idx, 0);
  EXPECT_EQ(w.requests[2].turn_idx, 1);
  EXPECT_TRUE(w.requests[2].extends_previous);  // 130 > 100 + 10: 20 new tokens
  EXPECT_EQ(w.requests[2].tokens.size(), 20u);
  EXPECT_EQ(w.requests[2].planned_prompt_len, 130);
  EXPECT_DOUBLE_EQ(w.requests[2].think_s, 0.5);
  EXPECT_FALSE(w.requests[3].extends_previous);  // shorter: a fresh prompt
  EXPECT_EQ(w.requests[3].tokens.size(), 20u);
}

// Times since the epoch (milliseconds here) replay from the first line's arrival, as times since
// the trace's start do.
TEST(TraceWorkloadTest, ReplayStartsAtTheFirstArrival) {
  const Workload w = build(
      "{\"timestamp\": 1767225600000, \"input_length\": 4, \"output_length\": 1}\n"
      "{\"timestamp\": 1767225600250, \"input_length\": 4, \"output_length\": 1}\n");
  ASSERT_EQ(w.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(w.requests[0].arrival_s, 0.0);
  EXPECT_NEAR(w.requests[1].arrival_s, 0.25, 1e-6);
}

TEST(TraceWorkloadTest, ATimeScaleThatMakesTheReplayLongerThanAWeekIsAnError) {
  const std::string hour =
      "{\"arrival_time\": 0, \"input_length\": 4, \"output_length\": 1}\n"
      "{\"arrival_time\": 3600, \"input_length\": 4, \"output_length\": 1}\n";
  EXPECT_NO_THROW(build(hour, {.time_scale = 100}));
  try {
    build(hour, {.time_scale = 200});  // 200 hours
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trace line 2: --trace-time-scale 200"), std::string::npos)
        << e.what();
  }
}

TEST(TraceWorkloadTest, MaxRequestsAndTimeScale) {
  const Workload w = build(
      "{\"arrival_time\": 1, \"input_ids\": [5, 6], \"output_length\": 1}\n"
      "{\"arrival_time\": 3, \"input_ids\": [7], \"output_length\": 1}\n"
      "{\"arrival_time\": 4, \"input_ids\": [8], \"output_length\": 1}\n",
      {.time_scale = 0.5, .max_requests = 2});
  ASSERT_EQ(w.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(w.requests[1].arrival_s, 1.0);  // (3 - 1) x 0.5: from the first arrival
  EXPECT_EQ(w.requests[0].tokens, (std::vector<int32_t>{5, 6}));
}

}  // namespace
}  // namespace strata::bench

#include "bench/report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "bench/progress.h"

namespace strata::bench {
namespace {

RunResult hand_built_run() {
  RunResult r;
  // Two requests: arrival 0 and 1; first tokens at 0.5 and 1.25; finishes at 1.5 and 2.0.
  r.requests = {{.arrival_s = 0,
                 .submit_s = 0,
                 .first_token_s = 0.5,
                 .finish_s = 1.5,
                 .prompt_len = 30,
                 .output_len = 3,
                 .num_output_tokens = 3},
                {.arrival_s = 1,
                 .submit_s = 1,
                 .first_token_s = 1.25,
                 .finish_s = 2.0,
                 .prompt_len = 10,
                 .output_len = 2,
                 .num_output_tokens = 2}};
  r.inter_token_s = {0.5, 0.5, 0.75};
  r.duration_s = 2.0;
  r.num_prompt_tokens = 40;
  r.num_output_tokens = 5;
  for (int i = 0; i < 4; ++i) {
    StepRecord s;
    s.num_scheduled_seqs = 1;
    s.num_running = i + 1;
    s.schedule_seconds = 0.001 * (i + 1);  // 1..4 ms
    s.step_seconds = 0.1;
    s.forward_seconds = 0.08;
    s.live_token_slots = 25 * (i + 1);  // 25..100 of 100
    s.capacity_token_slots = 100;
    s.num_used_blocks = 2 * (i + 1);  // 32 slots per 25 live at block size 16
    s.num_prefill_tokens = i == 0 ? 30 : 0;  // the first step runs a prompt, the rest decode
    s.num_decode_tokens = i == 0 ? 0 : 1;
    r.steps.push_back(s);
  }
  r.num_idle_steps = 3;
  r.cacheable = {.prompt_tokens = 40, .cacheable_tokens = 16};
  r.counters.num_prompt_tokens = 40;
  r.counters.num_cached_prompt_tokens = 8;
  r.counters.num_preemptions = 2;
  return r;
}

TEST(MetricsTest, ComputedFromAHandBuiltRun) {
  const BenchMetrics m =
      compute_metrics(hand_built_run(), {.block_size = 16, .kv_bytes_per_token = 256});
  EXPECT_DOUBLE_EQ(m.output_tokens_per_s, 2.5);
  EXPECT_DOUBLE_EQ(m.total_tokens_per_s, 22.5);
  EXPECT_DOUBLE_EQ(m.requests_per_s, 1.0);
  EXPECT_DOUBLE_EQ(m.ttft_s.p50, 0.375);  // 0.25 and 0.5
  EXPECT_DOUBLE_EQ(m.e2e_s.max, 1.5);
  EXPECT_DOUBLE_EQ(m.tpot_s.mean, 0.625);  // (1.0 / 2 + 0.75 / 1) / 2
  EXPECT_DOUBLE_EQ(m.inter_token_s.p50, 0.5);
  EXPECT_DOUBLE_EQ(m.pool_utilization, 0.625);  // mean of 0.25, 0.5, 0.75, 1
  EXPECT_DOUBLE_EQ(m.block_fill, 25.0 / 32.0);
  EXPECT_DOUBLE_EQ(m.mean_sequence_len, 22.5);  // (33 + 12) / 2
  EXPECT_DOUBLE_EQ(m.pool_utilization_bound, 1.0 - 16.0 / 45.0);
  EXPECT_DOUBLE_EQ(m.prefix_hit_rate, 0.2);
  EXPECT_DOUBLE_EQ(m.cacheable_share, 0.4);
  EXPECT_DOUBLE_EQ(m.schedule_s.mean, 0.0025);
  EXPECT_NEAR(m.schedule_s.p99, 0.00397, 1e-12);
  EXPECT_DOUBLE_EQ(m.schedule_share, 0.01 / 0.4);
  EXPECT_EQ(m.max_concurrency, 4);
  EXPECT_EQ(m.schedule_at_max_s.count, 1);  // the last step only
  EXPECT_DOUBLE_EQ(m.schedule_at_max_s.mean, 0.004);
  EXPECT_DOUBLE_EQ(m.schedule_share_at_max, 0.04);
  EXPECT_DOUBLE_EQ(m.mean_concurrency, 2.5);
  EXPECT_EQ(m.num_steps, 4);
  EXPECT_EQ(m.num_idle_steps, 3);
  EXPECT_EQ(m.num_preemptions, 2);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 256);
  EXPECT_EQ(m.prompt_steps.steps, 1);
  EXPECT_DOUBLE_EQ(m.prompt_steps.seconds, 0.1);
  EXPECT_EQ(m.decode_steps.steps, 3);
  EXPECT_NEAR(m.decode_steps.seconds, 0.3, 1e-12);
  EXPECT_NEAR(m.decode_steps.forward_seconds, 0.24, 1e-12);
  EXPECT_DOUBLE_EQ(m.prompt_steps.forward_seconds, 0.08);
  EXPECT_DOUBLE_EQ(m.decode_steps.mean_seqs, 1.0);
}

TEST(MetricsTest, EmptyRunIsAllZeros) {
  const BenchMetrics m = compute_metrics(RunResult{}, {});
  EXPECT_EQ(m.output_tokens_per_s, 0.0);
  EXPECT_EQ(m.pool_utilization, 0.0);
  EXPECT_EQ(m.pool_utilization_bound, 0.0);
  EXPECT_EQ(m.schedule_share, 0.0);
}

ReportHeader header() {
  ReportHeader h;
  h.model = "m";
  h.workload = "random";
  h.workload_description = "2 prompts";
  h.num_requests = 2;
  h.request_rate = std::numeric_limits<double>::infinity();
  h.preemption_mode = "recompute";
  h.scheduling_policy = "fcfs";
  return h;
}

TEST(ReportTest, JsonHasEveryRunWithItsFields) {
  BenchMetrics a = compute_metrics(hand_built_run(), {.block_size = 16});
  a.scheduler = "continuous";
  a.allocator = "paged";
  BenchMetrics b = a;
  b.scheduler = "static";
  const std::vector<BenchMetrics> runs = {a, b};
  const nlohmann::json j = nlohmann::json::parse(report_json(header(), runs));
  EXPECT_TRUE(j["header"]["workload"]["request_rate"].is_null());
  EXPECT_EQ(j["header"]["workload"]["name"], "random");
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][1]["scheduler"], "static");
  for (const char* key :
       {"output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "pool_utilization",
        "pool_utilization_bound", "prefix_hit_rate", "cacheable_share", "kv_bytes_per_token",
        "preemptions", "schedule_share", "max_concurrency"}) {
    EXPECT_TRUE(j["runs"][0][key].is_number()) << key;
  }
  for (const char* key : {"ttft_s", "inter_token_latency_s", "e2e_latency_s", "schedule_s"}) {
    for (const char* p : {"mean", "p50", "p90", "p99"}) {
      EXPECT_TRUE(j["runs"][0][key][p].is_number()) << key << "." << p;
    }
  }
  EXPECT_DOUBLE_EQ(j["runs"][0]["ttft_s"]["p50"].get<double>(), 0.375);
  EXPECT_EQ(j["runs"][0]["prompt_steps"]["steps"], 1);
  EXPECT_EQ(j["runs"][0]["decode_steps"]["steps"], 3);
  EXPECT_TRUE(j["runs"][0]["decode_steps"]["seconds"].is_number());
  EXPECT_NEAR(j["runs"][0]["decode_steps"]["forward_seconds"].get<double>(), 0.24, 1e-12);
}

TEST(ReportTest, TableHasOneColumnPerRun) {
  BenchMetrics a = compute_metrics(hand_built_run(), {.block_size = 16});
  a.scheduler = "continuous";
  a.allocator = "paged";
  BenchMetrics b = a;
  b.allocator = "contiguous";
  const std::vector<BenchMetrics> runs = {a, b};
  const std::string t = report_table(header(), runs);
  const size_t a_col = t.find("continuous / paged"), b_col = t.find("continuous / contiguous");
  ASSERT_NE(a_col, std::string::npos) << t;
  ASSERT_NE(b_col, std::string::npos) << t;
  EXPECT_LT(a_col, b_col);
  EXPECT_EQ(t.find('\n', a_col), t.find('\n', b_col)) << "one header line";
  EXPECT_NE(t.find("offline (all at once)"), std::string::npos) << t;
  EXPECT_NE(t.find("prefix hit rate (cacheable)"), std::string::npos) << t;
  EXPECT_NE(t.find("20.00 % (40.00 %)"), std::string::npos) << t;
  // Decode steps: 3 of them, 0.3 s, 80 % of it in the runner's forward pass, 1 sequence each.
  EXPECT_NE(t.find("3, 0.3 (80 %), 1.0"), std::string::npos) << t;
}

TEST(ReportTest, FailedRequestsAreCountedAndLeftOutOfTheLatencies) {
  RunResult run = hand_built_run();
  BenchMetrics clean = compute_metrics(run, {.block_size = 16});
  EXPECT_EQ(clean.ttft_s.count, 2);
  const std::vector<BenchMetrics> clean_runs = {clean};
  EXPECT_EQ(report_table(header(), clean_runs).find("failed"), std::string::npos);
  const auto run_json = [](const BenchMetrics& one) {
    return nlohmann::json::parse(report_json(header(), std::vector<BenchMetrics>{one}))["runs"][0];
  };
  EXPECT_EQ(run_json(clean)["failed_requests"], 0);
  EXPECT_TRUE(run_json(clean)["first_failure"].is_null());

  // The second request failed before its first token: its times mean nothing.
  run.requests[1].failed = true;
  run.requests[1].first_token_s = 0.0;
  run.requests[1].num_output_tokens = 0;
  run.num_failed = 1;
  run.first_failure = "request 1: HTTP 400: refused";
  BenchMetrics m = compute_metrics(run, {.block_size = 16, .slo = {.ttft_s = 1.0}});
  m.scheduler = "http";
  m.allocator = "a:1";
  EXPECT_EQ(m.ttft_s.count, 1);
  EXPECT_DOUBLE_EQ(m.ttft_s.max, 0.5);
  EXPECT_EQ(m.e2e_s.count, 1);
  EXPECT_EQ(m.num_good_requests, 1) << "a failed request never meets the SLO";
  EXPECT_DOUBLE_EQ(m.mean_sequence_len, 33.0);
  EXPECT_EQ(m.num_requests, 2);
  const nlohmann::json j = run_json(m);
  EXPECT_EQ(j["failed_requests"], 1);
  EXPECT_EQ(j["first_failure"], "request 1: HTTP 400: refused");
  const std::vector<BenchMetrics> runs = {m};
  const std::string t = report_table(header(), runs);
  EXPECT_NE(t.find("2 (1 failed)"), std::string::npos) << t;
  EXPECT_NE(t.find("http / a:1: 1 requests failed, left out of the latencies; the first: "
                   "request 1: HTTP 400: refused"),
            std::string::npos)
      << t;
}

TEST(ReportTest, RemoteTierLatencyAndBytesShowOnlyWhenTheTierWasUsed) {
  RunResult run = hand_built_run();
  BenchMetrics plain = compute_metrics(run, {.block_size = 16});
  EXPECT_EQ(report_table(header(), std::vector<BenchMetrics>{plain}).find("remote"),
            std::string::npos);
  // 99 reads in (1, 2 ms] and one in (200, 500 ms]; 10 writes in (5, 10 ms].
  for (int i = 0; i < 99; ++i) run.counters.kv_remote_get_latency.observe(0.0015);
  run.counters.kv_remote_get_latency.observe(0.3);
  for (int i = 0; i < 10; ++i) run.counters.kv_remote_put_latency.observe(0.007);
  run.counters.kv_remote_read_bytes = 3 << 20;
  run.counters.kv_remote_written_bytes = 1 << 19;
  const BenchMetrics m = compute_metrics(run, {.block_size = 16});
  EXPECT_EQ(m.kv_remote_get_s.count, 100);
  EXPECT_NEAR(m.kv_remote_get_s.mean, (99 * 0.0015 + 0.3) / 100, 1e-12);
  EXPECT_NEAR(m.kv_remote_get_s.p50, 0.001 + 0.001 * 50.0 / 99.0, 1e-12);
  EXPECT_NEAR(m.kv_remote_get_s.p99, 0.002, 1e-12);
  EXPECT_EQ(m.kv_remote_put_s.count, 10);
  EXPECT_NEAR(m.kv_remote_put_s.p50, 0.0075, 1e-12);
  const nlohmann::json j =
      nlohmann::json::parse(report_json(header(), std::vector<BenchMetrics>{m}));
  EXPECT_EQ(j["runs"][0]["kv_remote_read_bytes"], 3 << 20);
  EXPECT_EQ(j["runs"][0]["kv_remote_written_bytes"], 1 << 19);
  EXPECT_EQ(j["runs"][0]["kv_remote_get_s"]["count"], 100);
  EXPECT_NEAR(j["runs"][0]["kv_remote_get_s"]["p99"].get<double>(), 0.002, 1e-12);
  EXPECT_NEAR(j["runs"][0]["kv_remote_put_s"]["p50"].get<double>(), 0.0075, 1e-12);
  const std::string t = report_table(header(), std::vector<BenchMetrics>{m});
  EXPECT_NE(t.find("3.0 / 0.5"), std::string::npos) << t;    // MiB read / written
  EXPECT_NE(t.find("1.51 / 2.00"), std::string::npos) << t;  // get p50 / p99, ms
  EXPECT_NE(t.find("7.50 / "), std::string::npos) << t;      // put p50, ms
}

// Five requests over 4 s, times in eighths so every latency and threshold is exact:
//   request  arrival  first  finish  tokens  TTFT   TPOT   E2E
//   0        0        0.25   1.25    5       0.25   0.25   1.25
//   1        0        1.0    1.5     5       1.0    0.125  1.5
//   2        1        1.5    3.5     5       0.5    0.5    2.5
//   3        2        3.0    3.0     1       1.0    -      1.0
//   4        3        3.125  4.0     8       0.125  0.125  1.0
RunResult slo_run() {
  RunResult r;
  const auto request = [](double arrival, double first, double finish, int32_t tokens) {
    return RequestRecord{.arrival_s = arrival,
                         .submit_s = arrival,
                         .first_token_s = first,
                         .finish_s = finish,
                         .prompt_len = 8,
                         .output_len = tokens,
                         .num_output_tokens = tokens};
  };
  r.requests = {request(0, 0.25, 1.25, 5), request(0, 1.0, 1.5, 5), request(1, 1.5, 3.5, 5),
                request(2, 3.0, 3.0, 1), request(3, 3.125, 4.0, 8)};
  r.duration_s = 4.0;
  return r;
}

int64_t good_requests(const Slo& slo) {
  return compute_metrics(slo_run(), {.slo = slo}).num_good_requests;
}

TEST(GoodputTest, WithoutAnSloThereIsNoGoodput) {
  const BenchMetrics m = compute_metrics(slo_run(), {});
  EXPECT_FALSE(m.has_slo);
  EXPECT_EQ(m.num_good_requests, 0);
  EXPECT_EQ(m.goodput_requests_per_s, 0.0);
}

TEST(GoodputTest, EveryRequestMeetsALooseSlo) {
  const BenchMetrics m =
      compute_metrics(slo_run(), {.slo = {.ttft_s = 10, .tpot_s = 10, .e2e_s = 10}});
  EXPECT_TRUE(m.has_slo);
  EXPECT_EQ(m.num_good_requests, 5);
  EXPECT_DOUBLE_EQ(m.goodput_requests_per_s, 1.25);  // 5 / 4 s
  EXPECT_DOUBLE_EQ(m.goodput_requests_per_s, m.requests_per_s);
  EXPECT_DOUBLE_EQ(m.slo.tpot_s, 10);
}

TEST(GoodputTest, NoRequestMeetsATightSlo) {
  const BenchMetrics m = compute_metrics(slo_run(), {.slo = {.e2e_s = 0.5}});  // the least is 1.0
  EXPECT_TRUE(m.has_slo);
  EXPECT_EQ(m.num_good_requests, 0);
  EXPECT_EQ(m.goodput_requests_per_s, 0.0);
}

TEST(GoodputTest, CountsTheRequestsMeetingEveryGivenThreshold) {
  // TTFT <= 0.5: requests 0, 2 (at the threshold: inclusive) and 4.
  EXPECT_EQ(good_requests({.ttft_s = 0.5}), 3);
  // TPOT <= 0.25: all but request 2; request 0 sits at the threshold, request 3 has no TPOT.
  EXPECT_EQ(good_requests({.tpot_s = 0.25}), 4);
  // E2E <= 1.25: requests 0, 3 and 4.
  EXPECT_EQ(good_requests({.e2e_s = 1.25}), 3);
  // TTFT and TPOT: 0, 4 (2 fails TPOT).
  EXPECT_EQ(good_requests({.ttft_s = 0.5, .tpot_s = 0.25}), 2);
  // All three: requests 0 and 4 only, 2 / 4 s.
  const BenchMetrics m =
      compute_metrics(slo_run(), {.slo = {.ttft_s = 0.5, .tpot_s = 0.25, .e2e_s = 1.25}});
  EXPECT_EQ(m.num_good_requests, 2);
  EXPECT_DOUBLE_EQ(m.goodput_requests_per_s, 0.5);
  EXPECT_EQ(m.num_requests, 5);
}

TEST(GoodputTest, AOneTokenRequestMeetsAnyTpotThreshold) {
  // Every other request's TPOT is at least 0.125 s; request 3 has a single token.
  EXPECT_EQ(good_requests({.tpot_s = 1e-6}), 1);
  EXPECT_EQ(good_requests({.ttft_s = 0.5, .tpot_s = 1e-6}), 0);  // and it misses the TTFT
}

TEST(GoodputTest, IsGoodRequestsOverTheDuration) {
  // hand_built_run: TTFTs 0.5 and 0.25 s over 2 s.
  const BenchMetrics m = compute_metrics(hand_built_run(), {.slo = {.ttft_s = 0.4}});
  EXPECT_EQ(m.num_good_requests, 1);
  EXPECT_DOUBLE_EQ(m.goodput_requests_per_s, 0.5);
}

TEST(GoodputTest, ParsesVllmKeysInMilliseconds) {
  const std::vector<std::string> items = {"tpot:50", "ttft:500", "e2el:2000.5"};
  const Result<Slo> slo = parse_goodput(items);
  ASSERT_TRUE(slo.ok()) << slo.status().to_string();
  EXPECT_DOUBLE_EQ(slo->ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(slo->tpot_s, 0.05);
  EXPECT_DOUBLE_EQ(slo->e2e_s, 2.0005);
  const Result<Slo> one = parse_goodput(std::vector<std::string>{"e2el:1e3"});
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one->ttft_s, 0.0);
  EXPECT_EQ(one->tpot_s, 0.0);
  EXPECT_DOUBLE_EQ(one->e2e_s, 1.0);
  EXPECT_TRUE(one->active());
}

TEST(GoodputTest, RefusesBadItemsNamingThem) {
  EXPECT_EQ(parse_goodput(std::vector<std::string>{}).status().code(),
            StatusCode::kInvalidArgument);
  for (const char* bad :
       {"ttft", "ttft=500", "foo:5", "TTFT:5", "e2e:5", ":5", "ttft:", "ttft:abc", "ttft:5ms",
        "ttft: 5", "ttft:0", "ttft:-5", "ttft:inf", "ttft:nan", "ttft:1e-400", "ttft:5:6"}) {
    const Result<Slo> slo = parse_goodput(std::vector<std::string>{bad});
    ASSERT_FALSE(slo.ok()) << bad;
    EXPECT_EQ(slo.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(slo.status().message().find(std::string("--goodput '") + bad + "'"),
              std::string::npos)
        << slo.status().message();
  }
  const Result<Slo> twice = parse_goodput(std::vector<std::string>{"ttft:5", "tpot:1", "ttft:6"});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("ttft is given twice"), std::string::npos)
      << twice.status().message();
}

TEST(ReportTest, GoodputIsInTheJsonOnlyWithAnSlo) {
  const BenchMetrics plain = compute_metrics(hand_built_run(), {});
  const BenchMetrics slo = compute_metrics(hand_built_run(), {.slo = {.ttft_s = 0.4, .e2e_s = 2}});
  const nlohmann::json j =
      nlohmann::json::parse(report_json(header(), std::vector<BenchMetrics>{plain, slo}));
  EXPECT_TRUE(j["runs"][0]["goodput"].is_null());
  const nlohmann::json& g = j["runs"][1]["goodput"];
  EXPECT_DOUBLE_EQ(g["requests_per_s"].get<double>(), 0.5);
  EXPECT_EQ(g["good_requests"], 1);
  EXPECT_DOUBLE_EQ(g["slo"]["ttft_s"].get<double>(), 0.4);
  EXPECT_TRUE(g["slo"]["tpot_s"].is_null());  // not part of the SLO
  EXPECT_DOUBLE_EQ(g["slo"]["e2e_s"].get<double>(), 2.0);
}

TEST(ReportTest, GoodputRowAndSloLineOnlyWithAnSlo) {
  const BenchMetrics plain = compute_metrics(hand_built_run(), {});
  const std::string without = report_table(header(), std::vector<BenchMetrics>{plain});
  EXPECT_EQ(without.find("goodput"), std::string::npos) << without;
  EXPECT_EQ(without.find("SLO"), std::string::npos) << without;
  const BenchMetrics slo =
      compute_metrics(hand_built_run(), {.slo = {.ttft_s = 0.4, .tpot_s = 0.05}});
  const std::string with = report_table(header(), std::vector<BenchMetrics>{slo});
  EXPECT_NE(with.find("\nSLO        TTFT <= 400 ms, TPOT <= 50 ms\n\n"), std::string::npos) << with;
  // TPOTs 0.5 and 0.75 s: neither request meets 50 ms.
  const size_t row = with.find("goodput (SLO)");
  ASSERT_NE(row, std::string::npos) << with;
  EXPECT_NE(with.find("0.000 (0 of 2 requests)", row), std::string::npos) << with;
}

TEST(ProgressBarTest, RendersCountsAndRate) {
  const Progress p{.num_finished = 5,
                   .num_requests = 10,
                   .num_output_tokens = 300,
                   .num_running = 4,
                   .num_waiting = 1,
                   .elapsed_s = 2.0};
  EXPECT_EQ(ProgressBar::render("bench", p, 10),
            "bench [#####.....] 5/10 requests, 4 running, 1 waiting, 150.0 output tokens/s, 2.0 s");
  EXPECT_EQ(ProgressBar::render("bench", p, 0),
            "bench 5/10 requests, 4 running, 1 waiting, 150.0 output tokens/s, 2.0 s");
}

TEST(ProgressBarTest, NonTerminalWritesALineEveryInterval) {
  char buf[4096] = {};
  std::FILE* f = fmemopen(buf, sizeof buf, "w");
  ASSERT_NE(f, nullptr);
  ProgressBar bar(f, /*is_terminal=*/false, "b", 0.1, 5.0);
  for (int i = 0; i <= 80; ++i) bar.update({.num_requests = 1, .elapsed_s = i * 0.125});  // 10 s
  std::fclose(f);
  const std::string out = buf;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;  // at 0, 5 and 10 s
  EXPECT_EQ(out.find('\r'), std::string::npos);
}

}  // namespace
}  // namespace strata::bench

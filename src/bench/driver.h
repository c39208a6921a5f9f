#pragma once
// The bench driver: replays a Workload through a BenchEngine in one thread and records when
// every token arrived.
//
// Each iteration submits every request whose arrival time has come, runs one engine step, and
// stamps the step's new tokens with the time the step returned. A session's next turn becomes
// ready when the previous one finished (plus its think time), and its prompt is composed then:
// previous prompt + previous output + its new tokens. With nothing running, the driver sleeps
// until the next arrival. Offline workloads (every arrival 0) submit everything at once.
//
// Checks, each a strata::Error: the engine refuses a request, a step fails, a request is
// cancelled, a request's output length differs from what was asked (with ignore_eos; with
// EOS allowed it may be shorter, and the run counts it), or the engine stalls.

#include <cstdint>
#include <functional>
#include <vector>

#include "bench/bench_engine.h"
#include "bench/cacheable_share.h"
#include "bench/workload.h"

namespace strata::bench {

struct Progress {
  int64_t num_finished = 0;
  int64_t num_requests = 0;
  int64_t num_output_tokens = 0;
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  double elapsed_s = 0.0;
};

struct DriverOptions {
  bool ignore_eos = true;
  uint64_t seed = 0;        // request i samples with seed + i
  int32_t block_size = 16;  // the engine's, for the cacheable share
  // How long to wait when a step scheduled nothing (the static scheduler gathering a batch).
  double idle_wait_s = 5e-4;
  // A run whose engine holds requests but neither schedules nor returns anything for this long
  // stops with an error instead of hanging.
  double stall_timeout_s = 60.0;
  std::function<void(const Progress&)> on_progress = nullptr;  // after every step, when set
};

// Times are seconds after the run's start.
struct RequestRecord {
  double arrival_s = 0.0;  // when it was ready: its arrival, or its predecessor's finish
  double submit_s = 0.0;
  double first_token_s = 0.0;
  double finish_s = 0.0;
  int32_t prompt_len = 0;
  int32_t output_len = 0;         // asked
  int32_t num_output_tokens = 0;  // received
  bool failed = false;            // TokenEvent::error: no latency of it is counted
};

struct RunResult {
  std::vector<RequestRecord> requests;  // in workload order
  std::vector<double> inter_token_s;    // every gap between consecutive tokens of one request
  std::vector<StepRecord> steps;        // steps that scheduled at least one sequence
  int64_t num_idle_steps = 0;
  double duration_s = 0.0;  // start to the last finish
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_stopped_early = 0;  // finished before output_len (EOS allowed only)
  int64_t num_failed = 0;         // requests that failed (TokenEvent::error)
  std::string first_failure;      // the first failed request and why
  CacheableShare cacheable;       // in the order requests were really submitted
  EngineTotals counters;        // the engine's, after the run
};

RunResult run_workload(const Workload& workload, BenchEngine& engine, BenchClock& clock,
                       const DriverOptions& options);

}  // namespace strata::bench

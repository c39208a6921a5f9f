#pragma once
// BenchEngine and BenchClock: what the bench driver needs from an engine and from time, as two
// small interfaces, so the driver runs against strata::Engine in the CLI and against a scripted
// fake with a fake clock in the tests (no sleeping, no model).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "strata/engine_stats.h"

namespace strata::bench {

struct SubmitRequest {
  std::span<const int32_t> prompt;
  int32_t max_tokens = 1;
  bool ignore_eos = true;
  int32_t priority = 0;
  uint64_t seed = 0;
};

// One request's progress in one step.
struct TokenEvent {
  uint64_t id = 0;
  std::vector<int32_t> new_tokens;
  bool finished = false;
  bool cancelled = false;
  // Not empty: the request failed without an answer (its connection was refused or broke, or the
  // server answered with an error); finished is set. The run goes on and counts it.
  std::string error;
};

// What one step did (the engine's EngineStepStats; an HTTP engine fills what its streams show),
// and when.
struct StepRecord : EngineStepStats {
  double time_s = 0.0;  // when the step returned, seconds after the run's start
};

class BenchEngine {
 public:
  virtual ~BenchEngine() = default;
  // InvalidArgument when the engine refuses the request.
  virtual Result<uint64_t> submit(const SubmitRequest& request) = 0;
  // One engine step; appends the requests that advanced or finished to events and fills stats.
  virtual Status step(std::vector<TokenEvent>& events, StepRecord& stats) = 0;
  virtual bool has_unfinished() const = 0;
  // The engine's cumulative counters, read at the end of a run.
  virtual EngineTotals counters() const = 0;
};

class BenchClock {
 public:
  virtual ~BenchClock() = default;
  virtual double now() = 0;  // seconds, monotonic
  virtual void sleep_until(double t) = 0;
};

// std::chrono::steady_clock and std::this_thread::sleep_until.
class SteadyClock final : public BenchClock {
 public:
  double now() override;
  void sleep_until(double t) override;
};

}  // namespace strata::bench

#pragma once
// Workload: the requests one bench run replays, in submission order, independent of any engine.
//
// A request is either independent (its prompt is `tokens`) or a later turn of a session whose
// prompt continues the previous turn: prompt = previous prompt + previous output + `tokens`. The
// previous output is only known once that turn has run, so the driver composes the prompt at
// submit time; here the request holds only the new tokens and the planned lengths.
//
// Arrival: arrival_s is the earliest time (seconds after the start) the request may be sent.
// A session's turn k > 0 is sent at max(arrival_s, finish of turn k-1 + think_s).

#include <cstdint>
#include <string>
#include <vector>

namespace strata::bench {

struct BenchRequest {
  double arrival_s = 0.0;
  int64_t session_idx = -1;        // -1: not part of a session
  int32_t turn_idx = 0;            // position in its session
  bool extends_previous = false;   // prompt = previous turn's prompt + output + tokens
  std::vector<int32_t> tokens;     // the prompt, or the new tokens of a continuing turn
  int32_t output_len = 0;          // tokens asked for (max_tokens), >= 1
  int32_t planned_prompt_len = 0;  // prompt length when every earlier turn produced output_len
  double think_s = 0.0;            // pause after the previous turn of the session finished
  int32_t priority = 0;            // --scheduling-policy priority: lower runs first
  int64_t source_line = 0;         // 1-based trace line, 0 for synthetic requests

  // "request 7" or "trace line 12", for messages.
  std::string describe(size_t request_idx) const;
};

struct Workload {
  std::string name;         // "random", "sharegpt-like", "agentic", "trace"
  std::string description;  // the generating parameters, one line
  std::vector<BenchRequest> requests;
  int64_t num_sessions = 0;        // sessions among the requests (0 when none)
  bool has_arrival_times = false;  // arrivals come from the workload (trace timestamps)

  int64_t total_planned_prompt_tokens() const;
  int64_t total_output_tokens() const;
};

// Replaces every request's arrival time with a Poisson process of rate requests_per_s (seeded),
// for sessions only the first turn's (later turns follow their predecessor). Infinite rate: all
// arrivals at 0 (offline).
void assign_poisson_arrivals(Workload& workload, double requests_per_s, uint64_t seed);

// Checks the planned lengths against the engine's limits before anything runs; throws
// strata::Error naming the first offending request (its trace line for traces).
void validate_workload(const Workload& workload, int64_t max_model_len, int64_t vocab_size);

}  // namespace strata::bench

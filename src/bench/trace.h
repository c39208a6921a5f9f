#pragma once
// Trace replay: JSONL request traces, the Mooncake format among them, turned into a Workload.
//
// One JSON object per line (blank lines are skipped; unknown keys are ignored):
//   timestamp       arrival in milliseconds from the trace's start (Mooncake), or
//   arrival_time    arrival in seconds; every line has one of them, or none does (offline)
//   session_id      string or integer: the lines of one session are its turns, in file order
//   input_ids       the prompt's token ids, or
//   hash_ids        Mooncake: one id per hash_block_size-token block of the prompt, with
//                   input_length (the last block may be partial); equal ids are equal blocks, or
//   input_length    alone: a prompt of that many tokens (a session's later turn continues the
//                   previous turn when it is longer than that turn's prompt + output)
//   output_length   tokens to generate (required)
//   priority        integer, lower runs first under --scheduling-policy priority (default 0)
// Arrival times must not decrease from line to line. The replay starts at the first line's
// arrival (its time is subtracted from every line's), so times since the epoch replay as well as
// times since the trace's start. Every violation is a strata::Error naming the source and its
// 1-based line.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/synthetic_workloads.h"
#include "bench/workload.h"

namespace strata::bench {

// An arrival past this many seconds is an error (1e10 s: year 2286 as a Unix time, so both Unix
// seconds and Unix milliseconds pass, while 1e308 or a microsecond clock fails before anything
// runs).
inline constexpr double kMaxTraceArrivalS = 1e10;
// The longest a trace may span, first arrival to last, and the longest a replay may take after
// --trace-time-scale: a week. Traces are hours long; beyond a week is a wrong unit or a corrupt
// line, and a replay that waits for it would look like a hang.
inline constexpr double kMaxTraceSpanS = 7 * 86400.0;

// One parsed line, checked for types and ranges but not yet turned into tokens.
struct TraceRecord {
  int64_t line = 0;                 // 1-based line in the source
  std::optional<double> arrival_s;  // timestamp / 1000 or arrival_time, as written
  std::optional<std::string> session_id;
  std::optional<int64_t> input_length;
  std::vector<int32_t> input_ids;  // non-empty when given
  std::vector<int64_t> hash_ids;   // non-empty when given (then input_length is set)
  int32_t output_length = 0;
  int32_t priority = 0;
};

// Parses JSONL text; source_name prefixes every message ("trace.jsonl line 3: ...").
std::vector<TraceRecord> parse_trace_text(std::string_view text, std::string_view source_name);
// Reads and parses a file; throws strata::Error when it cannot be read.
std::vector<TraceRecord> load_trace(const std::filesystem::path& path);

struct TraceBuildConfig {
  int32_t hash_block_size = 512;  // tokens per hash id in the trace (Mooncake: 512)
  // Tokens per hash id built here: a small model replays a trace at block_size / hash_block_size
  // of its lengths (input_length-only lines scale the same way; input_ids never do).
  int32_t block_size = 512;
  double output_scale = 1.0;  // output lengths x this (rounded, at least 1)
  double time_scale = 1.0;    // times since the first arrival x this (0.5 replays twice as fast)
  int64_t max_requests = 0;   // the first N lines only; 0 = all
  double think_s = 0.0;       // pause between a session's turns
};

// Turns parsed records into a workload: hash ids become token blocks (a seeded function of the
// id, so equal ids give equal blocks across requests), lengths are scaled and checked against
// limits.max_model_len before any token is made. Throws strata::Error naming the line.
Workload build_trace_workload(const std::vector<TraceRecord>& records,
                              const TraceBuildConfig& config, const WorkloadLimits& limits);

}  // namespace strata::bench

#pragma once
// `strata bench`: replay a workload (random, sharegpt-like, agentic, or a JSONL / Mooncake trace)
// through the engine, offline or at a request rate, once per scheduler x allocator combination
// over one loaded model, and report throughput, latency percentiles, pool utilization, prefix
// hit rate against the cacheable share, and scheduler time per step (docs/bench.md). With
// --endpoint, the same workload goes to a running `strata serve` over HTTP instead.

#include <cstdint>
#include <string>
#include <vector>

#include "bench/report.h"
#include "engine_options.h"

namespace CLI {
class App;
}

namespace strata::cli {

// The engine flags (--model, --device, --block-size, ...) are EngineOptions'.
struct BenchOptions : EngineOptions {
  uint64_t seed = 0;

  // ---- workload -----------------------------------------------------------------------------
  std::string workload = "random";
  std::string trace;              // a JSONL file: replaces --workload
  // Every request's structured output: json_object, json_schema=@FILE, regex=PATTERN or
  // choice=A|B|... (empty: none).
  std::string structured_output;
  int64_t num_prompts = 0;        // 0: 100 for random and sharegpt-like, every line of a trace
  std::string input_len = "128";  // random: N or A:B
  std::string output_len = "32";
  int32_t prefix_len = 0;
  double input_median = 97.84, input_sigma = 1.0;  // sharegpt-like
  double output_median = 245.42, output_sigma = 0.8;
  double length_scale = 1.0;  // sharegpt-like and agentic
  int64_t num_sessions = 8;   // agentic
  std::string turns = "30";
  int32_t system_prompt_len = 2000;
  std::string turn_input_len = "200:3800";
  std::string turn_output_len = "100:500";
  double think_time_ms = 0.0;
  int32_t trace_block_size = 512;  // trace: tokens built per hash id
  int32_t trace_hash_block_size = 512;
  double trace_output_scale = 1.0;
  double trace_time_scale = 1.0;
  std::string request_rate;  // "inf" (offline) or requests per second; empty = default
  bool ignore_eos = true;
  float temperature = 0.0f;

  // ---- scheduling (beyond EngineOptions) ---------------------------------------------------
  std::string scheduling_policy = "fcfs";
  std::vector<std::string> schedulers = {"continuous"};
  std::vector<std::string> allocators = {"paged"};
  double batch_timeout_ms = 100.0;
  int32_t max_batch_size = 32;

  // ---- HTTP backend -------------------------------------------------------------------------
  // http://HOST:PORT of running servers (requests round-robin); empty = in-process engine
  std::vector<std::string> endpoints;
  std::string api_key;

  // ---- report -------------------------------------------------------------------------------
  // --goodput ttft:MS tpot:MS e2el:MS (any of them), in seconds; inactive = no goodput.
  bench::Slo goodput_slo;
  bool json = false;
};

void add_bench_command(CLI::App& app, BenchOptions& options);
// Returns the process exit code; throws strata::Error for bad options, files or runs.
int run_bench(const BenchOptions& options);

}  // namespace strata::cli

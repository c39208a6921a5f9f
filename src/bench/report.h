#pragma once
// Bench metrics: what one run measured, computed from the driver's RunResult, and the two ways
// of printing a set of runs side by side (a table for people, JSON for machines).
//
// Definitions (docs/bench.md repeats them):
//   duration             first submission to the last finish
//   output tokens/s      output tokens / duration; total tokens/s adds prompt tokens
//   TTFT                 first token - arrival (for a session turn, arrival = when it was ready)
//   inter-token latency  every gap between consecutive tokens of one request
//   TPOT                 per request, (finish - first token) / (output tokens - 1)
//   end-to-end latency   finish - arrival
//   pool utilization     mean over steps of live_token_slots / capacity_token_slots; its bound
//                        1 - block_size / (2 x mean sequence length) is what paging leaves
//                        (half a block per sequence)
//   block fill           mean over steps of live_token_slots / (used blocks x block_size)
//   prefix hit rate      cached prompt tokens / prompt tokens (the engine's totals), beside the
//                        cacheable share (cacheable_share.h), its ceiling
//   scheduler time       EngineStepStats::schedule_seconds per step (mean, p99) and its share of
//                        the summed step_seconds
//                        (also over only the steps at max concurrency)
//   prompt/decode steps  per kind of step: count, summed step_seconds, of which forward_seconds
//                        (the runner's), mean sequences; the rest is the host's own work
//   remote get / put     each read from Redis (the prefixes of the requests queued since the
//                        last read) and each write round trip
//                        (--kv-remote): p50 / p99 estimated from the engine's latency buckets
//                        (50 us to 10 s, 1-2-5 steps), linearly within a bucket
//   max concurrency      the most running requests after any step (over HTTP: the most streams
//                        in flight when an event arrived)
//   goodput              (--goodput) requests meeting every threshold of the SLO / duration: a
//                        request is good when TTFT <= ttft, TPOT <= tpot and end-to-end latency
//                        <= e2e, each threshold that is given (vLLM's benchmark_serving
//                        --goodput). A request of one output token has no TPOT and meets any
//                        TPOT threshold (vLLM counts its TPOT as 0); thresholds are inclusive
// Steps that scheduled nothing (a static batch gathering) are left out of the per-step figures.

#include <cstdint>
#include <span>
#include <string>

#include "bench/driver.h"
#include "bench/stats.h"
#include "core/status.h"

namespace strata::bench {

// A service-level objective on request latencies, in seconds; 0 = that latency is not part of it.
struct Slo {
  double ttft_s = 0.0;
  double tpot_s = 0.0;
  double e2e_s = 0.0;

  bool active() const { return ttft_s > 0 || tpot_s > 0 || e2e_s > 0; }
};

// `--goodput KEY:MS ...` (vLLM's syntax): keys ttft, tpot and e2el, each at most once, values
// milliseconds > 0 (finite). An empty list, a missing colon, an unknown key, a repeated key or a
// bad value is InvalidArgument with a message naming the item.
Result<Slo> parse_goodput(std::span<const std::string> items);

struct BenchMetrics {
  std::string scheduler;  // "continuous" / "static"
  std::string allocator;  // "paged" / "contiguous"

  int64_t num_requests = 0;
  double duration_s = 0.0;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  double output_tokens_per_s = 0.0;
  double total_tokens_per_s = 0.0;
  double requests_per_s = 0.0;
  // Goodput (see above): only with an SLO (has_slo = slo.active()), else zeros.
  bool has_slo = false;
  Slo slo = {};
  int64_t num_good_requests = 0;
  double goodput_requests_per_s = 0.0;

  Distribution ttft_s, inter_token_s, tpot_s, e2e_s;

  double pool_utilization = 0.0;
  double pool_utilization_bound = 0.0;
  double block_fill = 0.0;
  double mean_sequence_len = 0.0;

  double prefix_hit_rate = 0.0;
  double cacheable_share = 0.0;
  int64_t num_cached_prompt_tokens = 0;
  int64_t num_cacheable_tokens = 0;

  double kv_bytes_per_token = 0.0;
  int64_t num_preemptions = 0;
  int64_t num_swapped_out_blocks = 0;
  int64_t num_swapped_in_blocks = 0;
  // KV tiers (--kv-offload-bytes): prompt tokens brought back from host memory and from disk
  // (part of num_cached_prompt_tokens), blocks written down, blocks recomputed after a fault.
  int64_t kv_host_tier_hit_tokens = 0;
  int64_t kv_disk_tier_hit_tokens = 0;
  int64_t kv_offloaded_blocks = 0;
  int64_t kv_disk_written_blocks = 0;
  int64_t kv_tier_faults = 0;
  int64_t kv_remote_hit_tokens = 0;      // of the host tier's, brought from Redis
  int64_t kv_remote_written_blocks = 0;
  int64_t kv_remote_present_blocks = 0;  // not written: another instance had
  int64_t kv_remote_dropped_writes = 0;
  int64_t kv_remote_skipped_blocks = 0;    // not read: computing them was sooner
  int64_t kv_remote_overdue_requests = 0;  // admitted before their reads ended
  int64_t kv_remote_errors = 0;          // reads Redis did not answer
  int64_t kv_remote_read_bytes = 0;      // values read from Redis
  int64_t kv_remote_written_bytes = 0;   // values written to it
  // Each read from Redis (requests' prefixes) and each write round trip: count, mean, and
  // p50 / p99 estimated from the engine's buckets (LatencyHistogram::quantile).
  struct BucketedLatency {
    int64_t count = 0;
    double mean = 0.0;
    double p50 = 0.0;
    double p99 = 0.0;
  };
  BucketedLatency kv_remote_get_s, kv_remote_put_s;
  int64_t kv_prefetched_blocks = 0;  // disk -> host while the request waited
  int64_t kv_dropped_blocks = 0;     // evicted blocks no host slot could take
  double kv_disk_read_seconds = 0.0;  // the I/O threads' time reading
  double kv_io_wait_seconds = 0.0;    // the scheduler's time waiting for them
  double kv_tier_down_seconds = 0.0;  // copying blocks down to host memory
  double kv_tier_up_seconds = 0.0;    // checking and copying them up
  int64_t num_stopped_early = 0;
  // Requests that failed (RunResult::num_failed): left out of the latencies and the goodput.
  int64_t num_failed_requests = 0;
  std::string first_failure;

  int64_t num_steps = 0;
  int64_t num_idle_steps = 0;
  Distribution schedule_s, step_s;
  double schedule_share = 0.0;
  // The same over the steps that ran at max_concurrency (the scheduler's heaviest steps).
  Distribution schedule_at_max_s;
  double schedule_share_at_max = 0.0;
  int32_t max_concurrency = 0;
  double mean_concurrency = 0.0;
  // Where a run's time goes: the steps that ran prompt tokens (prompts, chunks, recomputed
  // preempted sequences; decode rows may ride along) and the steps of decode rows only, each
  // with its count, summed step time and mean sequences per step.
  struct StepPhase {
    int64_t steps = 0;
    double seconds = 0.0;
    double forward_seconds = 0.0;  // of which the runner's (copies, forward pass, results back)
    double mean_seqs = 0.0;
  };
  StepPhase prompt_steps, decode_steps;
};

struct MetricsContext {
  int32_t block_size = 16;
  double kv_bytes_per_token = 0.0;
  Slo slo = {};  // goodput's thresholds; inactive = no goodput
};

BenchMetrics compute_metrics(const RunResult& run, const MetricsContext& context);

// What the report says about the setup, above the runs.
struct ReportHeader {
  std::string model;
  // A running server's http://HOST:PORT (strata bench --endpoint), empty for the in-process
  // engine. Over HTTP the engine fields below are the bench's flags, not the server's, and
  // the per-step figures (pool utilization, block fill, steps, scheduler time) do not exist.
  std::string endpoint;
  std::string workload;  // name
  std::string workload_description;
  int64_t num_requests = 0;
  int64_t num_sessions = 0;
  double request_rate = 0.0;  // requests (sessions) per second; infinity = offline
  bool trace_timestamps = false;
  uint64_t seed = 0;
  bool ignore_eos = true;
  double temperature = 0.0;
  int32_t block_size = 16;
  int32_t num_blocks = 0;  // 0 = sized from kv_cache_memory_bytes
  int64_t kv_cache_memory_bytes = 0;
  int32_t max_num_seqs = 0;
  int32_t max_num_batched_tokens = 0;
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
  std::string preemption_mode;
  std::string scheduling_policy;
  int32_t max_batch_size = 0;
  double batch_timeout_ms = 0.0;
  int32_t num_threads = 0;
};

// One JSON document: {"header": {...}, "runs": [{...}, ...]}, times in seconds.
std::string report_json(const ReportHeader& header, std::span<const BenchMetrics> runs);
// A readable table, one column per run.
std::string report_table(const ReportHeader& header, std::span<const BenchMetrics> runs);

}  // namespace strata::bench

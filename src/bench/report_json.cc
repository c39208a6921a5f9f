// report_json: the bench's machine-readable output.

#include <nlohmann/json.hpp>

#include <cmath>

#include "bench/report.h"

namespace strata::bench {
namespace {

using nlohmann::json;

json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50},
          {"p90", d.p90},     {"p99", d.p99},   {"max", d.max}};
}

json bucketed_json(const BenchMetrics::BucketedLatency& l) {
  return {{"count", l.count}, {"mean", l.mean}, {"p50", l.p50}, {"p99", l.p99}};
}

json phase_json(const BenchMetrics::StepPhase& p) {
  return {{"steps", p.steps},
          {"seconds", p.seconds},
          {"forward_seconds", p.forward_seconds},
          {"mean_seqs", p.mean_seqs}};
}

// null without --goodput; a threshold that is not part of the SLO is null too.
json goodput_json(const BenchMetrics& m) {
  if (!m.has_slo) return nullptr;
  const auto threshold = [](double s) { return s > 0 ? json(s) : json(nullptr); };
  return {{"requests_per_s", m.goodput_requests_per_s},
          {"good_requests", m.num_good_requests},
          {"slo",
           {{"ttft_s", threshold(m.slo.ttft_s)},
            {"tpot_s", threshold(m.slo.tpot_s)},
            {"e2e_s", threshold(m.slo.e2e_s)}}}};
}

json header_json(const ReportHeader& h) {
  json out = {
      {"model", h.model},
      // null: the in-process engine; else the server the workload went to over HTTP
      {"endpoint", h.endpoint.empty() ? json(nullptr) : json(h.endpoint)},
      {"workload",
       {{"name", h.workload},
        {"description", h.workload_description},
        {"num_requests", h.num_requests},
        {"num_sessions", h.num_sessions},
        // null = offline (every request at once) or the trace's own timestamps
        {"request_rate", std::isfinite(h.request_rate) ? json(h.request_rate) : json(nullptr)},
        {"trace_timestamps", h.trace_timestamps},
        {"seed", h.seed},
        {"ignore_eos", h.ignore_eos},
        {"temperature", h.temperature}}},
      {"engine",
       {{"block_size", h.block_size},
        {"num_blocks", h.num_blocks},
        {"kv_cache_memory_bytes", h.kv_cache_memory_bytes},
        {"max_num_seqs", h.max_num_seqs},
        {"max_num_batched_tokens", h.max_num_batched_tokens},
        {"max_model_len", h.max_model_len},
        {"enable_prefix_caching", h.enable_prefix_caching},
        {"preemption_mode", h.preemption_mode},
        {"scheduling_policy", h.scheduling_policy},
        {"max_batch_size", h.max_batch_size},
        {"batch_timeout_ms", h.batch_timeout_ms},
        {"threads", h.num_threads}}},
  };
  if (!h.endpoint.empty()) out["engine"] = nullptr;  // the server's own flags, unknown here
  return out;
}

json run_json(const BenchMetrics& m) {
  return {
      {"scheduler", m.scheduler},
      {"allocator", m.allocator},
      {"num_requests", m.num_requests},
      {"duration_s", m.duration_s},
      {"prompt_tokens", m.num_prompt_tokens},
      {"output_tokens", m.num_output_tokens},
      {"output_tokens_per_s", m.output_tokens_per_s},
      {"total_tokens_per_s", m.total_tokens_per_s},
      {"requests_per_s", m.requests_per_s},
      {"goodput", goodput_json(m)},
      {"ttft_s", distribution_json(m.ttft_s)},
      {"inter_token_latency_s", distribution_json(m.inter_token_s)},
      {"tpot_s", distribution_json(m.tpot_s)},
      {"e2e_latency_s", distribution_json(m.e2e_s)},
      {"pool_utilization", m.pool_utilization},
      {"pool_utilization_bound", m.pool_utilization_bound},
      {"block_fill", m.block_fill},
      {"mean_sequence_len", m.mean_sequence_len},
      {"prefix_hit_rate", m.prefix_hit_rate},
      {"cacheable_share", m.cacheable_share},
      {"cached_prompt_tokens", m.num_cached_prompt_tokens},
      {"cacheable_tokens", m.num_cacheable_tokens},
      {"kv_bytes_per_token", m.kv_bytes_per_token},
      {"preemptions", m.num_preemptions},
      {"swapped_out_blocks", m.num_swapped_out_blocks},
      {"swapped_in_blocks", m.num_swapped_in_blocks},
      {"kv_host_tier_hit_tokens", m.kv_host_tier_hit_tokens},
      {"kv_disk_tier_hit_tokens", m.kv_disk_tier_hit_tokens},
      {"kv_offloaded_blocks", m.kv_offloaded_blocks},
      {"kv_disk_written_blocks", m.kv_disk_written_blocks},
      {"kv_tier_faults", m.kv_tier_faults},
      {"kv_remote_hit_tokens", m.kv_remote_hit_tokens},
      {"kv_remote_written_blocks", m.kv_remote_written_blocks},
      {"kv_remote_present_blocks", m.kv_remote_present_blocks},
      {"kv_remote_dropped_writes", m.kv_remote_dropped_writes},
      {"kv_remote_skipped_blocks", m.kv_remote_skipped_blocks},
      {"kv_remote_overdue_requests", m.kv_remote_overdue_requests},
      {"kv_remote_errors", m.kv_remote_errors},
      {"kv_remote_read_bytes", m.kv_remote_read_bytes},
      {"kv_remote_written_bytes", m.kv_remote_written_bytes},
      // p50 / p99 estimated from the engine's latency buckets
      {"kv_remote_get_s", bucketed_json(m.kv_remote_get_s)},
      {"kv_remote_put_s", bucketed_json(m.kv_remote_put_s)},
      {"kv_prefetched_blocks", m.kv_prefetched_blocks},
      {"kv_dropped_blocks", m.kv_dropped_blocks},
      {"kv_disk_read_seconds", m.kv_disk_read_seconds},
      {"kv_io_wait_seconds", m.kv_io_wait_seconds},
      {"kv_tier_down_seconds", m.kv_tier_down_seconds},
      {"kv_tier_up_seconds", m.kv_tier_up_seconds},
      {"stopped_early", m.num_stopped_early},
      {"failed_requests", m.num_failed_requests},
      {"first_failure", m.first_failure.empty() ? json(nullptr) : json(m.first_failure)},
      {"steps", m.num_steps},
      {"idle_steps", m.num_idle_steps},
      {"schedule_s", distribution_json(m.schedule_s)},
      {"step_s", distribution_json(m.step_s)},
      {"schedule_share", m.schedule_share},
      {"schedule_at_max_concurrency_s", distribution_json(m.schedule_at_max_s)},
      {"schedule_share_at_max_concurrency", m.schedule_share_at_max},
      {"max_concurrency", m.max_concurrency},
      {"mean_concurrency", m.mean_concurrency},
      {"prompt_steps", phase_json(m.prompt_steps)},
      {"decode_steps", phase_json(m.decode_steps)},
  };
}

}  // namespace

std::string report_json(const ReportHeader& header, std::span<const BenchMetrics> runs) {
  json out = {{"header", header_json(header)}, {"runs", json::array()}};
  for (const BenchMetrics& m : runs) out["runs"].push_back(run_json(m));
  return out.dump(2);
}

}  // namespace strata::bench

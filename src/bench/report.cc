#include "bench/report.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

namespace strata::bench {
namespace {

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

BenchMetrics::BucketedLatency bucketed(const LatencyHistogram& h) {
  return {h.count(), ratio(h.sum_seconds(), static_cast<double>(h.count())), h.quantile(0.5),
          h.quantile(0.99)};
}

// A request of one output token has no TPOT (0 here, as in vLLM).
double request_tpot(const RequestRecord& r) {
  return r.num_output_tokens > 1 ? (r.finish_s - r.first_token_s) / (r.num_output_tokens - 1) : 0.0;
}

bool meets(const RequestRecord& r, const Slo& slo) {
  return (slo.ttft_s <= 0 || r.first_token_s - r.arrival_s <= slo.ttft_s) &&
         (slo.tpot_s <= 0 || request_tpot(r) <= slo.tpot_s) &&
         (slo.e2e_s <= 0 || r.finish_s - r.arrival_s <= slo.e2e_s);
}

void goodput_metrics(const RunResult& run, const Slo& slo, BenchMetrics& m) {
  if (!slo.active()) return;
  m.has_slo = true;
  m.slo = slo;
  m.num_good_requests =
      std::count_if(run.requests.begin(), run.requests.end(),
                    [&](const RequestRecord& r) { return !r.failed && meets(r, slo); });
  m.goodput_requests_per_s = ratio(static_cast<double>(m.num_good_requests), run.duration_s);
}

void latency_metrics(const RunResult& run, BenchMetrics& m) {
  std::vector<double> ttft, tpot, e2e;
  double total_len = 0.0;
  int64_t answered = 0;
  for (const RequestRecord& r : run.requests) {
    if (r.failed) continue;
    ++answered;
    ttft.push_back(r.first_token_s - r.arrival_s);
    e2e.push_back(r.finish_s - r.arrival_s);
    if (r.num_output_tokens > 1) tpot.push_back(request_tpot(r));
    total_len += r.prompt_len + r.num_output_tokens;
  }
  m.ttft_s = summarize(ttft);
  m.tpot_s = summarize(tpot);
  m.e2e_s = summarize(e2e);
  std::vector<double> itl = run.inter_token_s;
  m.inter_token_s = summarize(itl);
  m.mean_sequence_len = ratio(total_len, static_cast<double>(answered));
}

void step_metrics(const RunResult& run, int32_t block_size, BenchMetrics& m) {
  std::vector<double> schedule, step;
  double util = 0.0, fill = 0.0, running = 0.0;
  for (const StepRecord& s : run.steps) {
    schedule.push_back(s.schedule_seconds);
    step.push_back(s.step_seconds);
    util +=
        ratio(static_cast<double>(s.live_token_slots), static_cast<double>(s.capacity_token_slots));
    fill += ratio(static_cast<double>(s.live_token_slots),
                  static_cast<double>(s.num_used_blocks) * block_size);
    running += s.num_running;
    m.max_concurrency = std::max(m.max_concurrency, s.num_running);
  }
  const auto n = static_cast<double>(run.steps.size());
  m.num_steps = static_cast<int64_t>(run.steps.size());
  m.num_idle_steps = run.num_idle_steps;
  m.pool_utilization = ratio(util, n);
  m.block_fill = ratio(fill, n);
  m.mean_concurrency = ratio(running, n);
  double schedule_sum = 0.0, step_sum = 0.0;
  for (const double s : schedule) schedule_sum += s;
  for (const double s : step) step_sum += s;
  m.schedule_share = ratio(schedule_sum, step_sum);
  m.schedule_s = summarize(schedule);
  m.step_s = summarize(step);
  std::vector<double> at_max;
  double at_max_sum = 0.0, at_max_step_sum = 0.0;
  for (const StepRecord& s : run.steps) {
    if (s.num_running < m.max_concurrency) continue;
    at_max.push_back(s.schedule_seconds);
    at_max_sum += s.schedule_seconds;
    at_max_step_sum += s.step_seconds;
  }
  m.schedule_at_max_s = summarize(at_max);
  m.schedule_share_at_max = ratio(at_max_sum, at_max_step_sum);
  double prompt_seqs = 0.0, decode_seqs = 0.0;
  for (const StepRecord& s : run.steps) {
    BenchMetrics::StepPhase& phase = s.num_prefill_tokens > 0 ? m.prompt_steps : m.decode_steps;
    ++phase.steps;
    phase.seconds += s.step_seconds;
    phase.forward_seconds += s.forward_seconds;
    (s.num_prefill_tokens > 0 ? prompt_seqs : decode_seqs) += s.num_scheduled_seqs;
  }
  m.prompt_steps.mean_seqs = ratio(prompt_seqs, static_cast<double>(m.prompt_steps.steps));
  m.decode_steps.mean_seqs = ratio(decode_seqs, static_cast<double>(m.decode_steps.steps));
}

}  // namespace

Result<Slo> parse_goodput(std::span<const std::string> items) {
  if (items.empty()) {
    return Status::InvalidArgument("--goodput: give one or more of ttft:MS, tpot:MS, e2el:MS");
  }
  Slo slo;
  for (const std::string& item : items) {
    const auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("--goodput '" + item + "': " + why);
    };
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return bad("expected KEY:MS (keys ttft, tpot, e2el)");
    const std::string_view key = std::string_view(item).substr(0, colon);
    const std::string_view value = std::string_view(item).substr(colon + 1);
    double* threshold = key == "ttft"   ? &slo.ttft_s
                        : key == "tpot" ? &slo.tpot_s
                        : key == "e2el" ? &slo.e2e_s
                                        : nullptr;
    if (threshold == nullptr) return bad("unknown key (use ttft, tpot or e2el)");
    if (*threshold > 0) return bad(std::string(key) + " is given twice");
    double ms = 0.0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() ||
        !std::isfinite(ms) || !(ms / 1e3 > 0)) {
      return bad("the threshold must be milliseconds > 0");
    }
    *threshold = ms / 1e3;
  }
  return slo;
}

BenchMetrics compute_metrics(const RunResult& run, const MetricsContext& context) {
  BenchMetrics m;
  m.num_requests = static_cast<int64_t>(run.requests.size());
  m.duration_s = run.duration_s;
  m.num_prompt_tokens = run.num_prompt_tokens;
  m.num_output_tokens = run.num_output_tokens;
  m.output_tokens_per_s = ratio(static_cast<double>(run.num_output_tokens), run.duration_s);
  m.total_tokens_per_s =
      ratio(static_cast<double>(run.num_prompt_tokens + run.num_output_tokens), run.duration_s);
  m.requests_per_s = ratio(static_cast<double>(m.num_requests), run.duration_s);
  latency_metrics(run, m);
  goodput_metrics(run, context.slo, m);
  step_metrics(run, context.block_size, m);
  m.pool_utilization_bound =
      m.mean_sequence_len > 0 ? 1.0 - context.block_size / (2.0 * m.mean_sequence_len) : 0.0;
  const EngineTotals& c = run.counters;
  m.num_cached_prompt_tokens = c.num_cached_prompt_tokens;
  m.prefix_hit_rate = ratio(static_cast<double>(c.num_cached_prompt_tokens),
                            static_cast<double>(c.num_prompt_tokens));
  m.num_cacheable_tokens = run.cacheable.cacheable_tokens;
  m.cacheable_share = run.cacheable.share();
  m.kv_bytes_per_token = context.kv_bytes_per_token;
  m.num_preemptions = c.num_preemptions;
  m.num_swapped_out_blocks = c.num_swapped_out_blocks;
  m.num_swapped_in_blocks = c.num_swapped_in_blocks;
  m.kv_host_tier_hit_tokens = c.kv_host_tier_hit_tokens;
  m.kv_disk_tier_hit_tokens = c.kv_disk_tier_hit_tokens;
  m.kv_offloaded_blocks = c.kv_offloaded_blocks;
  m.kv_disk_written_blocks = c.kv_disk_written_blocks;
  m.kv_tier_faults = c.kv_tier_faults;
  m.kv_remote_hit_tokens = c.kv_remote_hit_tokens;
  m.kv_remote_written_blocks = c.kv_remote_written_blocks;
  m.kv_remote_present_blocks = c.kv_remote_present_blocks;
  m.kv_remote_dropped_writes = c.kv_remote_dropped_writes;
  m.kv_remote_skipped_blocks = c.kv_remote_skipped_blocks;
  m.kv_remote_overdue_requests = c.kv_remote_overdue_requests;
  m.kv_remote_errors = c.kv_remote_errors;
  m.kv_remote_read_bytes = c.kv_remote_read_bytes;
  m.kv_remote_written_bytes = c.kv_remote_written_bytes;
  m.kv_remote_get_s = bucketed(c.kv_remote_get_latency);
  m.kv_remote_put_s = bucketed(c.kv_remote_put_latency);
  m.kv_prefetched_blocks = c.kv_prefetched_blocks;
  m.kv_dropped_blocks = c.kv_dropped_blocks;
  m.kv_disk_read_seconds = c.kv_disk_read_seconds;
  m.kv_io_wait_seconds = c.kv_io_wait_seconds;
  m.kv_tier_down_seconds = c.kv_tier_down_seconds;
  m.kv_tier_up_seconds = c.kv_tier_up_seconds;
  m.num_stopped_early = run.num_stopped_early;
  m.num_failed_requests = run.num_failed;
  m.first_failure = run.first_failure;
  return m;
}

}  // namespace strata::bench

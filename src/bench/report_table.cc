// report_table: the bench's readable output, one column per run.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/report.h"

namespace strata::bench {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ms(double seconds) { return fmt("%.2f", seconds * 1e3); }
std::string us(double seconds) { return fmt("%.1f", seconds * 1e6); }
std::string pct(double share) { return fmt("%.2f %%", share * 100.0); }
std::string num(double v) { return fmt("%.0f", v); }
std::string phase(const BenchMetrics::StepPhase& p) {
  const double fwd = p.seconds > 0 ? 100.0 * p.forward_seconds / p.seconds : 0.0;
  return num(static_cast<double>(p.steps)) + ", " + fmt("%.1f", p.seconds) + " (" +
         fmt("%.0f", fwd) + " %), " + fmt("%.1f", p.mean_seqs);
}

struct Row {
  std::string label;
  std::function<std::string(const BenchMetrics&)> cell;
  bool engine_only = false;  // a per-step figure: left out over HTTP
  bool remote_only = false;  // the remote tier's: left out when no run used it
  bool slo_only = false;     // goodput: left out without --goodput
};

bool used_remote(const BenchMetrics& m) {
  return m.kv_remote_get_s.count > 0 || m.kv_remote_put_s.count > 0 || m.kv_remote_read_bytes > 0 ||
         m.kv_remote_written_bytes > 0;
}

// "TTFT <= 500 ms, TPOT <= 50 ms": the thresholds that are part of the SLO.
std::string slo_text(const Slo& slo) {
  std::string out;
  const auto add = [&](const char* name, double s) {
    if (s <= 0) return;
    out += (out.empty() ? "" : ", ") + std::string(name) + " <= " + fmt("%g", s * 1e3) + " ms";
  };
  add("TTFT", slo.ttft_s);
  add("TPOT", slo.tpot_s);
  add("E2E", slo.e2e_s);
  return out;
}

std::string goodput(const BenchMetrics& m) {
  if (!m.has_slo) return "-";
  return fmt("%.3f", m.goodput_requests_per_s) + " (" +
         num(static_cast<double>(m.num_good_requests)) + " of " +
         num(static_cast<double>(m.num_requests)) + " requests)";
}

std::string mib(int64_t bytes) { return fmt("%.1f", static_cast<double>(bytes) / (1 << 20)); }

std::vector<Row> rows() {
  return {
      {"requests",
       [](const BenchMetrics& m) {
         return num(static_cast<double>(m.num_requests)) +
                (m.num_failed_requests > 0
                     ? " (" + num(static_cast<double>(m.num_failed_requests)) + " failed)"
                     : "");
       }},
      {"duration (s)", [](const BenchMetrics& m) { return fmt("%.3f", m.duration_s); }},
      {"prompt / output tokens",
       [](const BenchMetrics& m) {
         return num(m.num_prompt_tokens) + " / " + num(m.num_output_tokens);
       }},
      {"output tokens/s", [](const BenchMetrics& m) { return fmt("%.1f", m.output_tokens_per_s); }},
      {"total tokens/s", [](const BenchMetrics& m) { return fmt("%.1f", m.total_tokens_per_s); }},
      {"requests/s", [](const BenchMetrics& m) { return fmt("%.3f", m.requests_per_s); }},
      {"goodput (SLO) requests/s", goodput, false, false, true},
      {"TTFT p50/p90/p99 (ms)",
       [](const BenchMetrics& m) {
         return ms(m.ttft_s.p50) + " / " + ms(m.ttft_s.p90) + " / " + ms(m.ttft_s.p99);
       }},
      {"ITL p50/p90/p99 (ms)",
       [](const BenchMetrics& m) {
         return ms(m.inter_token_s.p50) + " / " + ms(m.inter_token_s.p90) + " / " +
                ms(m.inter_token_s.p99);
       }},
      {"TPOT mean (ms)", [](const BenchMetrics& m) { return ms(m.tpot_s.mean); }},
      {"E2E p50/p90/p99 (ms)",
       [](const BenchMetrics& m) {
         return ms(m.e2e_s.p50) + " / " + ms(m.e2e_s.p90) + " / " + ms(m.e2e_s.p99);
       }},
      {"pool utilization (bound)",
       [](const BenchMetrics& m) {
         return pct(m.pool_utilization) + " (" + pct(m.pool_utilization_bound) + ")";
       },
       true},
      {"block fill", [](const BenchMetrics& m) { return pct(m.block_fill); }, true},
      {"prefix hit rate (cacheable)",
       [](const BenchMetrics& m) {
         return pct(m.prefix_hit_rate) + " (" + pct(m.cacheable_share) + ")";
       }},
      {"KV bytes/token", [](const BenchMetrics& m) { return num(m.kv_bytes_per_token); }},
      {"remote hit tokens", [](const BenchMetrics& m) { return num(m.kv_remote_hit_tokens); },
       false, true},
      {"remote skipped blocks / overdue requests",
       [](const BenchMetrics& m) {
         return num(m.kv_remote_skipped_blocks) + " / " + num(m.kv_remote_overdue_requests);
       },
       false, true},
      {"remote written / present / dropped blocks",
       [](const BenchMetrics& m) {
         return num(m.kv_remote_written_blocks) + " / " + num(m.kv_remote_present_blocks) + " / " +
                num(m.kv_remote_dropped_writes);
       },
       false, true},
      {"remote read / written (MiB)",
       [](const BenchMetrics& m) {
         return mib(m.kv_remote_read_bytes) + " / " + mib(m.kv_remote_written_bytes);
       },
       false, true},
      {"remote get p50/p99 (ms)",
       [](const BenchMetrics& m) {
         return ms(m.kv_remote_get_s.p50) + " / " + ms(m.kv_remote_get_s.p99);
       },
       true, true},
      {"remote put p50/p99 (ms)",
       [](const BenchMetrics& m) {
         return ms(m.kv_remote_put_s.p50) + " / " + ms(m.kv_remote_put_s.p99);
       },
       true, true},
      {"preemptions", [](const BenchMetrics& m) { return num(m.num_preemptions); }},
      {"max / mean concurrency",
       [](const BenchMetrics& m) {
         return num(m.max_concurrency) + " / " + fmt("%.1f", m.mean_concurrency);
       }},
      {"steps", [](const BenchMetrics& m) { return num(m.num_steps); }, true},
      {"schedule mean/p99 (us)",
       [](const BenchMetrics& m) { return us(m.schedule_s.mean) + " / " + us(m.schedule_s.p99); },
       true},
      {"schedule share of step", [](const BenchMetrics& m) { return pct(m.schedule_share); }, true},
      {"  at max concurrency",
       [](const BenchMetrics& m) {
         return us(m.schedule_at_max_s.mean) + " us, " + pct(m.schedule_share_at_max);
       },
       true},
      {"step mean (ms)", [](const BenchMetrics& m) { return ms(m.step_s.mean); }, true},
      {"prompt steps: n, s (fwd), seqs",
       [](const BenchMetrics& m) { return phase(m.prompt_steps); }, true},
      {"decode steps: n, s (fwd), seqs",
       [](const BenchMetrics& m) { return phase(m.decode_steps); }, true},
  };
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string report_table(const ReportHeader& h, std::span<const BenchMetrics> runs) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "model      %s\nworkload   %s: %s\n", h.model.c_str(),
                h.workload.c_str(), h.workload_description.c_str());
  out += line;
  const std::string arrivals = h.trace_timestamps ? "trace timestamps"
                               : std::isfinite(h.request_rate)
                                   ? fmt("Poisson, %g requests/s", h.request_rate)
                                   : std::string("offline (all at once)");
  if (h.endpoint.empty()) {
    std::snprintf(line, sizeof line,
                  "arrivals   %s\nengine     block size %d, max-num-seqs %d, "
                  "max-num-batched-tokens %d, prefix caching %s, preemption %s, policy %s\n",
                  arrivals.c_str(), h.block_size, h.max_num_seqs, h.max_num_batched_tokens,
                  h.enable_prefix_caching ? "on" : "off", h.preemption_mode.c_str(),
                  h.scheduling_policy.c_str());
  } else {
    std::snprintf(line, sizeof line, "arrivals   %s\nserver     %s (streaming /v1/completions)\n",
                  arrivals.c_str(), h.endpoint.c_str());
  }
  out += line;
  // Every run of a report has the same SLO (one --goodput).
  const auto with_slo =
      std::find_if(runs.begin(), runs.end(), [](const BenchMetrics& m) { return m.has_slo; });
  if (with_slo != runs.end()) out += "SLO        " + slo_text(with_slo->slo) + "\n";
  out += '\n';
  std::vector<Row> table = rows();
  if (!h.endpoint.empty()) std::erase_if(table, [](const Row& r) { return r.engine_only; });
  if (with_slo == runs.end()) std::erase_if(table, [](const Row& r) { return r.slo_only; });
  if (std::none_of(runs.begin(), runs.end(), used_remote)) {
    std::erase_if(table, [](const Row& r) { return r.remote_only; });
  }
  size_t label_width = 0;
  for (const Row& r : table) label_width = std::max(label_width, r.label.size());
  std::vector<std::vector<std::string>> cells(runs.size());
  std::vector<size_t> widths(runs.size());
  for (size_t c = 0; c < runs.size(); ++c) {
    cells[c].push_back(runs[c].scheduler + " / " + runs[c].allocator);
    for (const Row& r : table) cells[c].push_back(r.cell(runs[c]));
    for (const std::string& s : cells[c]) widths[c] = std::max(widths[c], s.size());
  }
  for (size_t row = 0; row <= table.size(); ++row) {
    out += pad(row == 0 ? "" : table[row - 1].label, label_width);
    for (size_t c = 0; c < runs.size(); ++c) out += "  " + pad(cells[c][row], widths[c]);
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  }
  for (const BenchMetrics& m : runs) {
    if (m.num_failed_requests == 0) continue;
    out += "\n" + m.scheduler + " / " + m.allocator + ": " +
           num(static_cast<double>(m.num_failed_requests)) +
           " requests failed, left out of the latencies; the first: " + m.first_failure + "\n";
  }
  return out;
}

}  // namespace strata::bench

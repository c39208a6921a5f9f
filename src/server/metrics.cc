#include "server/metrics.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include "strata/latency_histogram.h"

namespace strata::server {
namespace {

void line(std::string& out, const std::string& text) {
  out += text;
  out += '\n';
}

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  line(out, std::string("# HELP ") + name + " " + help);
  line(out, std::string("# TYPE ") + name + " " + type);
  char buf[64];
  std::snprintf(buf, sizeof(buf), " %.17g", value);
  line(out, std::string(name) + buf);
}

// A Prometheus histogram: bucket_le(i) observations at or below bounds[i], then +Inf (count).
template <size_t N, typename BucketLe>
void render_histogram(std::string& out, const std::string& name, const std::string& help,
                      const std::array<double, N>& bounds, const BucketLe& bucket_le, int64_t count,
                      double sum) {
  line(out, "# HELP " + name + " " + help);
  line(out, "# TYPE " + name + " histogram");
  char buf[96];
  for (size_t i = 0; i < N; ++i) {
    std::snprintf(buf, sizeof(buf), "_bucket{le=\"%g\"} %lld", bounds[i],
                  static_cast<long long>(bucket_le(i)));
    line(out, name + buf);
  }
  std::snprintf(buf, sizeof(buf), "_bucket{le=\"+Inf\"} %lld", static_cast<long long>(count));
  line(out, name + buf);
  std::snprintf(buf, sizeof(buf), "_sum %.17g", sum);
  line(out, name + buf);
  std::snprintf(buf, sizeof(buf), "_count %lld", static_cast<long long>(count));
  line(out, name + buf);
}

void render_latency(std::string& out, const std::string& name, const std::string& help,
                    const LatencyHistogram& h) {
  render_histogram(
      out, name, help, LatencyHistogram::kBounds, [&](size_t i) { return h.cumulative(i); },
      h.count(), h.sum_seconds());
}

}  // namespace

void Histogram::observe(double seconds) {
  for (size_t i = 0; i < kBuckets.size(); ++i) counts_[i] += seconds <= kBuckets[i] ? 1 : 0;
  ++count_;
  sum_ += seconds;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  render_histogram(
      out, name, help, kBuckets, [&](size_t i) { return counts_[i]; }, count_, sum_);
}

void Metrics::record_finished(const RequestMetrics& m, const std::string& reason,
                              int64_t num_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_by_reason_[reason];
  if (m.first_token_time > 0.0) ttft_.observe(m.first_token_time - m.arrival_time);
  if (m.finished_time > 0.0) e2e_.observe(m.finished_time - m.arrival_time);
  if (m.finished_time > 0.0 && m.first_token_time > 0.0 && num_tokens > 1) {
    itl_.observe((m.finished_time - m.first_token_time) / static_cast<double>(num_tokens - 1));
  }
}

std::string Metrics::render(const EngineSnapshot& s, const KvCacheFacts& kv,
                            int64_t active_http_requests, const TransportStats& http) const {
  std::string out;
  const EngineStepStats& st = s.last_step;
  const EngineTotals& t = s.totals;
  metric(out, "strata:num_requests_running", "gauge", "Sequences in the running batch.",
         st.num_running);
  metric(out, "strata:num_requests_running_max", "gauge",
         "The most sequences running after any step since the server started.",
         s.max_num_running);
  metric(out, "strata:num_requests_waiting", "gauge", "Sequences waiting for admission.",
         st.num_waiting);
  metric(out, "strata:num_requests_swapped", "gauge", "Sequences swapped to host memory.",
         st.num_swapped);
  const auto blocks = static_cast<double>(st.num_used_blocks + st.num_free_blocks);
  metric(out, "strata:kv_cache_usage_perc", "gauge", "Share of KV blocks in use (1 = full).",
         blocks > 0 ? st.num_used_blocks / blocks : 0.0);
  metric(out, "strata:kv_cache_used_blocks", "gauge",
         "KV blocks held by requests (cached blocks nobody holds count as free).",
         st.num_used_blocks);
  metric(out, "strata:kv_cache_free_blocks", "gauge", "KV blocks free or evictable.",
         st.num_free_blocks);
  metric(out, "strata:prefix_cache_blocks", "gauge",
         "KV blocks the prefix cache holds, in use or evictable.", st.num_cached_blocks);
  metric(out, "strata:http_requests_active", "gauge",
         "HTTP requests being handled, this scrape included.",
         static_cast<double>(active_http_requests));
  metric(out, "strata:http_connections", "gauge", "Open HTTP connections.",
         static_cast<double>(http.num_connections));
  metric(out, "strata:http_connections_rejected_total", "counter",
         "Connections closed on accept: over --max-connections or --max-connections-per-client.",
         static_cast<double>(http.num_rejected_connections));
  metric(out, "strata:http_read_timeouts_total", "counter",
         "Connections closed because a request was not read whole within --http-read-timeout.",
         static_cast<double>(http.num_timed_out));
  metric(out, "strata:http_buffered_body_bytes", "gauge",
         "Request body bytes held in memory (--max-buffered-body-bytes bounds them).",
         static_cast<double>(http.buffered_body_bytes));
  metric(out, "strata:kv_bytes_per_token", "gauge",
         "KV cache bytes one token takes, quantization scales included.",
         static_cast<double>(kv.bytes_per_token));
  metric(out, "strata:kv_scale_bytes_per_token", "gauge",
         "Of strata:kv_bytes_per_token, the per-token quantization scales.",
         static_cast<double>(kv.scale_bytes_per_token));
  metric(out, "strata:kv_cache_block_size", "gauge", "Tokens per KV cache block.",
         static_cast<double>(kv.block_size));
  // Each KV cache group's pool (docs/kv.md, "KV cache groups"): group 0 is the one above; an
  // INT4 cache's newest blocks and a hybrid model's windowed layers have a pool of their own.
  const std::pair<const char*, const char*> group_metrics[] = {
      {"strata:kv_group_blocks", "Blocks of each KV cache group's pool (the null block included)."},
      {"strata:kv_group_used_blocks", "Blocks of each KV cache group's pool held by requests."},
      {"strata:kv_group_bytes", "Bytes of each KV cache group's pool."}};
  for (size_t m = 0; m < std::size(group_metrics); ++m) {
    if (s.kv_groups.empty()) break;
    const char* name = group_metrics[m].first;
    line(out, std::string("# HELP ") + name + " " + group_metrics[m].second);
    line(out, std::string("# TYPE ") + name + " gauge");
    for (size_t g = 0; g < s.kv_groups.size(); ++g) {
      const KvGroupStats& k = s.kv_groups[g];
      std::string kind = k.kind;
      std::replace(kind.begin(), kind.end(), ' ', '_');
      line(out, std::string(name) + "{group=\"" + std::to_string(g) + "\",kind=\"" + kind + "\"} " +
                    std::to_string(m == 0   ? int64_t{k.num_blocks}
                                   : m == 1 ? int64_t{k.num_used_blocks}
                                            : k.pool_bytes()));
    }
  }
  metric(out, "strata:prefix_cache_queries_total", "counter", "Prompt tokens looked up.",
         static_cast<double>(t.prefix_query_tokens));
  metric(out, "strata:prefix_cache_hits_total", "counter", "Prompt tokens found in the cache.",
         static_cast<double>(t.prefix_hit_tokens));
  metric(out, "strata:kv_evicted_blocks_total", "counter",
         "Blocks token eviction (kv_eviction) took from sequences' block tables.",
         static_cast<double>(t.num_kv_evicted_blocks));
  metric(out, "strata:kv_evicted_tokens_total", "counter",
         "Single tokens token-level eviction (h2o, snapkv) took from sequences' KV.",
         static_cast<double>(t.num_kv_evicted_tokens));
  line(out, "# HELP strata:kv_tier_hits_total Prompt tokens brought back from a KV tier.");
  line(out, "# TYPE strata:kv_tier_hits_total counter");
  line(out,
       "strata:kv_tier_hits_total{tier=\"host\"} " + std::to_string(t.kv_host_tier_hit_tokens));
  line(out,
       "strata:kv_tier_hits_total{tier=\"disk\"} " + std::to_string(t.kv_disk_tier_hit_tokens));
  metric(out, "strata:kv_remote_hits_total", "counter",
         "Prompt tokens the remote tier (Redis) brought back (part of the host tier's).",
         static_cast<double>(t.kv_remote_hit_tokens));
  metric(out, "strata:kv_remote_written_blocks_total", "counter", "Blocks written to Redis.",
         static_cast<double>(t.kv_remote_written_blocks));
  metric(out, "strata:kv_remote_present_blocks_total", "counter",
         "Blocks not written to Redis: another instance had written them already.",
         static_cast<double>(t.kv_remote_present_blocks));
  metric(out, "strata:kv_remote_dropped_writes_total", "counter",
         "Writes to Redis dropped: the queue was full or Redis did not answer.",
         static_cast<double>(t.kv_remote_dropped_writes));
  metric(out, "strata:kv_remote_skipped_blocks_total", "counter",
         "Blocks not read from Redis: computing them was expected to end sooner.",
         static_cast<double>(t.kv_remote_skipped_blocks));
  metric(out, "strata:kv_remote_overdue_requests_total", "counter",
         "Requests computed without waiting longer for their reads from Redis.",
         static_cast<double>(t.kv_remote_overdue_requests));
  metric(out, "strata:kv_remote_errors_total", "counter",
         "Reads of Redis that got no answer in time (the prefix was recomputed).",
         static_cast<double>(t.kv_remote_errors));
  metric(out, "strata:kv_remote_read_bytes_total", "counter",
         "Bytes of values read from Redis (checked or not).",
         static_cast<double>(t.kv_remote_read_bytes));
  metric(out, "strata:kv_remote_written_bytes_total", "counter",
         "Bytes of values written to Redis.", static_cast<double>(t.kv_remote_written_bytes));
  metric(out, "strata:kv_peer_read_blocks_total", "counter",
         "Blocks a decode instance read from its prefill instance and checked.",
         static_cast<double>(t.kv_peer_read_blocks));
  metric(out, "strata:kv_peer_read_bytes_total", "counter",
         "Bytes a decode instance read from its prefill instance.",
         static_cast<double>(t.kv_peer_read_bytes));
  metric(out, "strata:kv_peer_faults_total", "counter",
         "Blocks from the prefill instance that failed a check or did not come in time "
         "(recomputed).",
         static_cast<double>(t.kv_peer_faults));
  metric(out, "strata:kv_peer_errors_total", "counter",
         "Reads of the prefill instance that got no answer (the blocks were recomputed).",
         static_cast<double>(t.kv_peer_errors));
  metric(out, "strata:kv_peer_served_blocks_total", "counter",
         "Blocks a prefill instance served to decode instances.",
         static_cast<double>(t.kv_peer_served_blocks));
  metric(out, "strata:kv_peer_served_bytes_total", "counter",
         "Bytes a prefill instance served to decode instances.",
         static_cast<double>(t.kv_peer_served_bytes));
  metric(out, "strata:kv_peer_region_read_blocks_total", "counter",
         "Of the blocks a decode instance read, those copied out of the prefill instance's "
         "region (--kv-peer-region: CUDA IPC or shared memory).",
         static_cast<double>(t.kv_peer_region_read_blocks));
  metric(out, "strata:kv_peer_region_pool_blocks_total", "counter",
         "Of the blocks copied out of the prefill instance's region, those copied straight into "
         "the KV pool (device to device on a GPU), through no host slot.",
         static_cast<double>(t.kv_peer_region_pool_blocks));
  metric(out, "strata:kv_peer_region_reused_total", "counter",
         "Blocks whose region slot the prefill instance took again during the copy "
         "(recomputed).",
         static_cast<double>(t.kv_peer_region_reused));
  metric(out, "strata:kv_peer_dropped_blocks_total", "counter",
         "Blocks a prefill instance's outbox could not take (its coder was behind).",
         static_cast<double>(t.kv_peer_dropped_blocks));
  metric(out, "strata:kv_events_published_total", "counter",
         "Blocks named by the KV events handed to the publisher (--kv-events-endpoint).",
         static_cast<double>(t.kv_events_published_blocks));
  metric(out, "strata:kv_events_dropped_total", "counter",
         "Blocks named by KV events dropped because the publisher's queue was full.",
         static_cast<double>(t.kv_events_dropped_blocks));
  metric(out, "strata:kv_peer_transfer_seconds_total", "counter",
         "Of the reads of the prefill instance, the round trips that brought blocks (their "
         "checks included, the waits for blocks not there yet not).",
         t.kv_peer_transfer_seconds);
  render_latency(out, "strata:kv_peer_get_seconds",
                 "Reads of the prefill instance (the blocks of the requests queued since the last "
                 "read, waits for blocks not there yet included).",
                 t.kv_peer_get_latency);
  render_latency(out, "strata:kv_remote_get_seconds",
                 "Reads from Redis (the prefixes of the requests queued since the last read, all "
                 "servers' round trips together), answered or not.",
                 t.kv_remote_get_latency);
  render_latency(out, "strata:kv_remote_put_seconds",
                 "Write round trips to Redis (a batch of blocks), answered or not.",
                 t.kv_remote_put_latency);
  metric(out, "strata:kv_offloaded_blocks_total", "counter",
         "Evicted blocks written to the host tier.", static_cast<double>(t.kv_offloaded_blocks));
  metric(out, "strata:kv_disk_written_blocks_total", "counter",
         "Host-tier blocks written down to disk.", static_cast<double>(t.kv_disk_written_blocks));
  metric(out, "strata:kv_tier_faults_total", "counter",
         "Tier blocks that failed a check or an I/O and were recomputed.",
         static_cast<double>(t.kv_tier_faults));
  metric(out, "strata:kv_prefetched_blocks_total", "counter",
         "Blocks loaded from disk into host memory while their request waited.",
         static_cast<double>(t.kv_prefetched_blocks));
  metric(out, "strata:kv_dropped_blocks_total", "counter",
         "Evicted blocks lost: every host-tier slot was pinned for disk I/O.",
         static_cast<double>(t.kv_dropped_blocks));
  metric(out, "strata:kv_io_wait_seconds_total", "counter",
         "Time the scheduler waited for KV tier disk I/O.", t.kv_io_wait_seconds);
  metric(out, "strata:prompt_tokens_total", "counter", "Prompt tokens admitted.",
         static_cast<double>(t.num_prompt_tokens));
  metric(out, "strata:generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(t.num_generated_tokens));
  metric(out, "strata:num_preemptions_total", "counter", "Sequences preempted.",
         static_cast<double>(t.num_preemptions));
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.render(out, "strata:time_to_first_token_seconds", "Time to first token.");
  itl_.render(out, "strata:inter_token_latency_seconds", "Mean time between output tokens.");
  e2e_.render(out, "strata:e2e_request_latency_seconds", "Arrival to last token.");
  line(out, "# HELP strata:request_success_total Finished requests by finish reason.");
  line(out, "# TYPE strata:request_success_total counter");
  for (const auto& [reason, n] : finished_by_reason_) {
    line(out, "strata:request_success_total{finished_reason=\"" + reason + "\"} " +
                  std::to_string(n));
  }
  return out;
}

}  // namespace strata::server

// GET /metrics without HTTP: the remote KV tier's byte counters and its get / put latency
// histograms in Prometheus's text format (cumulative buckets, +Inf equal to the count, the sum),
// and the request latency histograms beside them.

#include <gtest/gtest.h>

#include <string>

#include "server/metrics.h"

namespace strata::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(MetricsTextTest, RemoteTierBytesAndLatencyHistograms) {
  EngineSnapshot s;
  s.totals.kv_remote_read_bytes = 123456;
  s.totals.kv_remote_written_bytes = 7890;
  s.totals.kv_remote_present_blocks = 12;
  s.totals.kv_remote_get_latency.observe(0.0015);  // (1, 2 ms]
  s.totals.kv_remote_get_latency.observe(0.0015);
  s.totals.kv_remote_get_latency.observe(0.3);   // (200, 500 ms]
  s.totals.kv_remote_put_latency.observe(20.0);  // past the last bound
  const std::string t = Metrics().render(s, KvCacheFacts{}, 1, TransportStats{});
  EXPECT_TRUE(has_line(t, "strata:kv_remote_read_bytes_total 123456")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_written_bytes_total 7890")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_present_blocks_total 12")) << t;
  EXPECT_TRUE(has_line(t, "# TYPE strata:kv_remote_get_seconds histogram")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_bucket{le=\"5e-05\"} 0")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_bucket{le=\"0.001\"} 0")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_bucket{le=\"0.002\"} 2")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_bucket{le=\"0.2\"} 2")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_bucket{le=\"0.5\"} 3")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_bucket{le=\"10\"} 3")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_bucket{le=\"+Inf\"} 3")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_count 3")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_get_seconds_sum 0.30299999999999999")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_put_seconds_bucket{le=\"10\"} 0")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_put_seconds_bucket{le=\"+Inf\"} 1")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_remote_put_seconds_count 1")) << t;
  // The request histograms keep their own buckets.
  EXPECT_TRUE(has_line(t, "strata:time_to_first_token_seconds_bucket{le=\"0.001\"} 0")) << t;
  EXPECT_TRUE(has_line(t, "strata:time_to_first_token_seconds_count 0")) << t;
}

// A decode instance's reads of its prefill instance: their whole time and the part that moved
// blocks (what bench_disaggregation.sh divides the bytes by).
TEST(MetricsTextTest, PeerReadsAndTheirTransferTime) {
  EngineSnapshot s;
  s.totals.kv_peer_read_bytes = 4096;
  s.totals.kv_peer_get_latency.observe(1.5);
  s.totals.kv_peer_transfer_seconds = 0.25;
  const std::string t = Metrics().render(s, KvCacheFacts{}, 1, TransportStats{});
  EXPECT_TRUE(has_line(t, "strata:kv_peer_read_bytes_total 4096")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_peer_get_seconds_sum 1.5")) << t;
  EXPECT_TRUE(has_line(t, "# TYPE strata:kv_peer_transfer_seconds_total counter")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_peer_transfer_seconds_total 0.25")) << t;
}

// Of those, the blocks copied out of the prefill instance's region (one machine), those of them
// copied straight into the pool, and the slots taken again during a copy.
TEST(MetricsTextTest, PeerRegionReads) {
  EngineSnapshot s;
  s.totals.kv_peer_read_blocks = 7;
  s.totals.kv_peer_region_read_blocks = 5;
  s.totals.kv_peer_region_reused = 2;
  s.totals.kv_peer_region_pool_blocks = 4;
  const std::string t = Metrics().render(s, KvCacheFacts{}, 1, TransportStats{});
  EXPECT_TRUE(has_line(t, "strata:kv_peer_read_blocks_total 7")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_peer_region_read_blocks_total 5")) << t;
  EXPECT_TRUE(has_line(t, "# TYPE strata:kv_peer_region_pool_blocks_total counter")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_peer_region_pool_blocks_total 4")) << t;
  EXPECT_TRUE(has_line(t, "# TYPE strata:kv_peer_region_reused_total counter")) << t;
  EXPECT_TRUE(has_line(t, "strata:kv_peer_region_reused_total 2")) << t;
}

}  // namespace
}  // namespace strata::server

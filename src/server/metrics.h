#pragma once
// Metrics: the server's Prometheus text (GET /metrics), vLLM-style names under `strata:`.
// Gauges and counters come from the engine's snapshot; latency histograms and finished requests
// by reason are recorded here as requests end. Thread-safe (handler threads record, the metrics
// handler renders).

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "server/async_engine.h"
#include "server/http_transport.h"

namespace strata::server {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                                      0.1,   0.25,  0.5,  1.0,  2.5,  5.0,  10.0};
  void observe(double seconds);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::array<int64_t, kBuckets.size()> counts_{};
  int64_t count_ = 0;
  double sum_ = 0.0;
};

// What the KV pool stores per token, fixed for the life of the server.
struct KvCacheFacts {
  int64_t bytes_per_token = 0;        // all layers, K and V, scales included
  int64_t scale_bytes_per_token = 0;  // of which per-token scales (int8)
  int32_t block_size = 0;
};

class Metrics {
 public:
  // One finished request: its engine metrics and its finish reason ("stop", "length", "abort").
  void record_finished(const RequestMetrics& m, const std::string& reason, int64_t num_tokens);
  // active_http_requests: requests being handled, this scrape included; http: the transport's
  // connections and what its limits refused.
  std::string render(const EngineSnapshot& snapshot, const KvCacheFacts& kv,
                     int64_t active_http_requests, const TransportStats& http) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_, e2e_, itl_;
  std::map<std::string, int64_t> finished_by_reason_;
};

}  // namespace strata::server

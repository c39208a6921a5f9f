#pragma once
// HttpBenchEngine: running OpenAI-compatible servers (`strata serve`) behind the bench driver's
// BenchEngine interface, so `strata bench --endpoint URL` replays the same workloads, with the
// same arrivals and statistics, through HTTP. Several endpoints (instances of one model) take
// the requests round-robin -- the i-th submitted goes to endpoints[i mod N] -- so a session's
// turns land on different instances, the worst case for caches local to an instance.
//
// Each submitted request streams POST /v1/completions on a thread and connection of its own
// (cpp-httplib's client): the prompt as token ids, max_tokens, ignore_eos, temperature, seed,
// stream with include_usage, and vLLM's return_token_ids, so every server-sent event says which
// tokens it carries. step() waits until some stream has news (at most `poll`), hands every
// event over, and returns; the driver stamps the tokens with that time, as it stamps an engine
// step's. There is no engine step to describe: StepRecord carries only the streams in flight
// (num_running) and how many advanced (num_scheduled_seqs). Counters come from the streams'
// usage (prompt, cached and generated tokens) and, for preemptions and the KV tiers' counters,
// from each endpoint's /metrics: what it counted since connect(), summed over the endpoints.
//
// Thread-safety: the driver's thread calls submit / step / has_unfinished / counters; the stream
// threads only push events under the mutex. The destructor waits for every stream thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/bench_engine.h"
#include "core/status.h"

namespace strata::bench {

struct HttpBenchConfig {
  std::vector<std::string> endpoints;  // "http://host:port", at least one
  std::string api_key;   // sent as a bearer token when set
  std::string model;     // empty: the first model GET /v1/models lists
  double temperature = 0.0;
  std::chrono::microseconds poll{1000};  // the longest step() waits for news
};

// What the servers say about themselves at connect() (the first endpoint's figures; every
// endpoint must serve the same model with the same KV bytes per token).
struct ServerInfo {
  std::string model;
  int64_t max_model_len = 0;       // the smallest endpoint's; 0 when /v1/models does not say
  int64_t kv_bytes_per_token = 0;  // strata:kv_bytes_per_token, 0 when absent
};

class HttpBenchEngine final : public BenchEngine {
 public:
  // Asks each server for its model (GET /v1/models) and its metrics; Unavailable when one cannot
  // be reached, InvalidArgument for a malformed endpoint or servers that serve different models.
  static Result<std::unique_ptr<HttpBenchEngine>> connect(HttpBenchConfig config);
  ~HttpBenchEngine() override;
  HttpBenchEngine(const HttpBenchEngine&) = delete;
  HttpBenchEngine& operator=(const HttpBenchEngine&) = delete;

  const ServerInfo& server() const { return info_; }

  Result<uint64_t> submit(const SubmitRequest& request) override;
  // A stream that failed (an HTTP error, a refused or broken connection, an event that is not
  // what was asked) finishes its request with TokenEvent::error, the server's message in it.
  Status step(std::vector<TokenEvent>& events, StepRecord& stats) override;
  bool has_unfinished() const override;
  EngineTotals counters() const override;

 private:
  // Counters an endpoint's /metrics holds (kMetricCounters in the .cc), in its order.
  using MetricCounts = std::vector<double>;

  HttpBenchEngine(HttpBenchConfig config, ServerInfo info, std::vector<MetricCounts> at_start);
  // Where request id went: round-robin in submission order.
  const std::string& endpoint_of(uint64_t id) const;
  void stream(uint64_t id, std::string body);
  void push(TokenEvent event);
  void fail(uint64_t id, const std::string& why);  // finishes the request with the error

  struct Thread {
    std::thread thread;
    std::atomic<bool> exited{false};  // the stream is over; join() will not wait
  };

  HttpBenchConfig config_;
  ServerInfo info_;
  std::vector<MetricCounts> at_start_;  // per endpoint, at connect()
  uint64_t next_id_ = 1;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenEvent> pending_;  // from the stream threads, not yet handed to step()
  EngineTotals totals_;              // from the streams' usage
  std::atomic<bool> stopping_{false};  // the destructor runs: streams end early
  // Driver thread only (counters() joins the last ones, hence mutable).
  int64_t num_in_flight_ = 0;  // submitted, final event not yet handed out
  mutable std::unordered_map<uint64_t, Thread> threads_;
};

}  // namespace strata::bench

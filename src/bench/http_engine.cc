#include "bench/http_engine.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>
#include <utility>
#include <variant>

#include "core/json_input.h"
#include "core/quote.h"
#include "strata/latency_histogram.h"

namespace strata::bench {
namespace {

using nlohmann::json;

// The longest a stream may go without a byte: a server that stalls fails the run, not hangs it.
constexpr time_t kReadTimeoutS = 120;

std::unique_ptr<httplib::Client> make_client(const HttpBenchConfig& c,
                                             const std::string& endpoint) {
  auto client = std::make_unique<httplib::Client>(endpoint);
  client->set_connection_timeout(10);
  client->set_read_timeout(kReadTimeoutS);
  if (!c.api_key.empty()) client->set_bearer_token_auth(c.api_key);
  return client;
}

// The value of the Prometheus sample "NAME VALUE" (NAME with its labels, if any), or -1 when it is
// absent.
double prometheus_value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 &&
        line[name.size()] == ' ') {
      return std::stod(line.substr(name.size() + 1));
    }
  }
  return -1.0;
}

// The EngineTotals counters a server's /metrics holds: the bench reports what each endpoint
// counted during the run, summed.
struct MetricCounter {
  const char* name;
  int64_t EngineTotals::*field;
};
constexpr MetricCounter kMetricCounters[] = {
    {"strata:num_preemptions_total", &EngineTotals::num_preemptions},
    {"strata:kv_tier_hits_total{tier=\"host\"}", &EngineTotals::kv_host_tier_hit_tokens},
    {"strata:kv_tier_hits_total{tier=\"disk\"}", &EngineTotals::kv_disk_tier_hit_tokens},
    {"strata:kv_remote_hits_total", &EngineTotals::kv_remote_hit_tokens},
    {"strata:kv_remote_written_blocks_total", &EngineTotals::kv_remote_written_blocks},
    {"strata:kv_remote_present_blocks_total", &EngineTotals::kv_remote_present_blocks},
    {"strata:kv_remote_dropped_writes_total", &EngineTotals::kv_remote_dropped_writes},
    {"strata:kv_remote_skipped_blocks_total", &EngineTotals::kv_remote_skipped_blocks},
    {"strata:kv_remote_overdue_requests_total", &EngineTotals::kv_remote_overdue_requests},
    {"strata:kv_remote_errors_total", &EngineTotals::kv_remote_errors},
    {"strata:kv_remote_read_bytes_total", &EngineTotals::kv_remote_read_bytes},
    {"strata:kv_remote_written_bytes_total", &EngineTotals::kv_remote_written_bytes},
    {"strata:kv_offloaded_blocks_total", &EngineTotals::kv_offloaded_blocks},
    {"strata:kv_disk_written_blocks_total", &EngineTotals::kv_disk_written_blocks},
    {"strata:kv_tier_faults_total", &EngineTotals::kv_tier_faults},
    {"strata:kv_prefetched_blocks_total", &EngineTotals::kv_prefetched_blocks},
};

// The EngineTotals latency histograms a server's /metrics holds (render_latency's form: a
// cumulative bucket per LatencyHistogram bound, then _count and _sum).
struct MetricHistogram {
  const char* name;
  LatencyHistogram EngineTotals::*field;
};
constexpr MetricHistogram kMetricHistograms[] = {
    {"strata:kv_remote_get_seconds", &EngineTotals::kv_remote_get_latency},
    {"strata:kv_remote_put_seconds", &EngineTotals::kv_remote_put_latency},
};
constexpr size_t kHistogramValues = LatencyHistogram::kBounds.size() + 2;

// Each of kMetricCounters in a /metrics text, then each of kMetricHistograms' values (0 where
// absent: a metric not exported yet).
std::vector<double> metric_counts(const std::string& text) {
  std::vector<double> v;
  for (const MetricCounter& m : kMetricCounters) {
    v.push_back(std::max(0.0, prometheus_value(text, m.name)));
  }
  for (const MetricHistogram& h : kMetricHistograms) {
    char le[64];
    for (const double bound : LatencyHistogram::kBounds) {
      std::snprintf(le, sizeof(le), "_bucket{le=\"%g\"}", bound);
      v.push_back(std::max(0.0, prometheus_value(text, h.name + std::string(le))));
    }
    v.push_back(std::max(0.0, prometheus_value(text, h.name + std::string("_count"))));
    v.push_back(std::max(0.0, prometheus_value(text, h.name + std::string("_sum"))));
  }
  return v;
}

// Adds what /metrics counted between two scrapes (metric_counts) to totals.
void add_metric_deltas(const std::vector<double>& now, const std::vector<double>& start,
                       EngineTotals& totals) {
  size_t at = 0;
  for (const MetricCounter& m : kMetricCounters) {
    totals.*m.field += static_cast<int64_t>(now[at] - start[at]);
    ++at;
  }
  for (const MetricHistogram& h : kMetricHistograms) {
    std::array<int64_t, LatencyHistogram::kBounds.size()> le{};
    for (size_t i = 0; i < le.size(); ++i, ++at) le[i] = static_cast<int64_t>(now[at] - start[at]);
    const auto count = static_cast<int64_t>(now[at] - start[at]);
    const double sum = now[at + 1] - start[at + 1];
    at += 2;
    (totals.*h.field).add_cumulative(le, count, sum);
  }
}

// Reads one stream's server-sent events: token ids as they come, the finish reason, the usage.
class SseReader {
 public:
  // Feeds bytes; calls on_tokens(ids, finish_reason or "") for each chunk with news. Returns an
  // error message for a malformed or error event.
  template <typename OnTokens>
  std::string feed(const char* data, size_t n, OnTokens&& on_tokens) {
    buffer_.append(data, n);
    for (size_t at = buffer_.find("\n\n"); at != std::string::npos; at = buffer_.find("\n\n")) {
      const std::string event = buffer_.substr(0, at);
      buffer_.erase(0, at + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // comments, other fields
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done_ = true;
        continue;
      }
      // A server's reply is outside input too: bounded nesting, bounded quotes in messages.
      const std::variant<json, JsonInputError> parsed =
          parse_json_input(payload, kMaxFileJsonDepth);
      const json* event_json = std::get_if<json>(&parsed);
      if (event_json == nullptr || !event_json->is_object()) {
        return "an event that is not a JSON object: " + quote(payload, 200);
      }
      const json& j = *event_json;
      if (j.contains("error")) return "an error event: " + quote(payload, 200);
      if (const auto u = j.find("usage"); u != j.end() && u->is_object()) usage_ = *u;
      for (const json& c : j.value("choices", json::array())) {
        std::vector<int32_t> ids;
        if (const auto t = c.find("token_ids"); t != c.end() && t->is_array()) {
          ids = t->get<std::vector<int32_t>>();
        } else if (!c.value("text", std::string()).empty()) {
          return "a chunk without token_ids (the server ignores return_token_ids): " +
                 quote(payload, 200);
        }
        const json reason = c.value("finish_reason", json(nullptr));
        const std::string finish = reason.is_string() ? reason.get<std::string>() : "";
        if (!ids.empty() || !finish.empty()) on_tokens(std::move(ids), finish);
      }
    }
    return {};
  }
  bool done() const { return done_; }
  const json& usage() const { return usage_; }

 private:
  std::string buffer_;
  bool done_ = false;
  json usage_;
};

// One endpoint's /v1/models and /metrics.
struct Probe {
  ServerInfo info;
  std::vector<double> counts;
};

Result<Probe> probe(const HttpBenchConfig& config, const std::string& e) {
  auto client = make_client(config, e);
  const size_t colon = e.rfind(':');
  if (e.rfind("http://", 0) != 0 || colon <= 7 || colon + 1 == e.size() ||
      e.find_first_not_of("0123456789", colon + 1) != std::string::npos || !client->is_valid()) {
    return Status::InvalidArgument("--endpoint '" + e + "': give http://HOST:PORT");
  }
  const httplib::Result models = client->Get("/v1/models");
  if (!models) {
    return Status::Unavailable("cannot reach " + e + ": " + httplib::to_string(models.error()));
  }
  if (models->status != 200) {
    return Status::Unavailable(e + "/v1/models answered " + std::to_string(models->status) +
                               ": " + quote(models->body, 200));
  }
  Probe p;
  std::variant<json, JsonInputError> parsed = parse_json_input(models->body, kMaxFileJsonDepth);
  const json list =
      std::holds_alternative<json>(parsed) ? std::move(std::get<json>(parsed)) : json();
  if (list.is_object() && list.contains("data") && list["data"].is_array() &&
      !list["data"].empty() && list["data"][0].is_object()) {
    const json& first = list["data"][0];
    p.info.model = first.value("id", std::string());
    p.info.max_model_len = first.value("max_model_len", int64_t{0});
  }
  if (!config.model.empty()) p.info.model = config.model;
  if (p.info.model.empty()) return Status::Unavailable(e + " serves no model");
  p.counts.assign(std::size(kMetricCounters) + std::size(kMetricHistograms) * kHistogramValues,
                  0.0);
  if (const httplib::Result metrics = client->Get("/metrics"); metrics && metrics->status == 200) {
    p.info.kv_bytes_per_token = std::max<int64_t>(
        0, static_cast<int64_t>(prometheus_value(metrics->body, "strata:kv_bytes_per_token")));
    p.counts = metric_counts(metrics->body);
  }
  return p;
}

}  // namespace

Result<std::unique_ptr<HttpBenchEngine>> HttpBenchEngine::connect(HttpBenchConfig config) {
  if (config.endpoints.empty()) return Status::InvalidArgument("--endpoint: none given");
  ServerInfo info;
  std::vector<MetricCounts> at_start;
  for (const std::string& e : config.endpoints) {
    Result<Probe> p = probe(config, e);
    if (!p.ok()) return p.status();
    if (at_start.empty()) {
      info = p->info;
    } else if (p->info.model != info.model ||
               p->info.kv_bytes_per_token != info.kv_bytes_per_token) {
      return Status::InvalidArgument(
          "--endpoint: " + e + " serves " + quote(p->info.model, 100) + " at " +
          std::to_string(p->info.kv_bytes_per_token) + " KV bytes per token, " +
          config.endpoints[0] + " serves " + quote(info.model, 100) + " at " +
          std::to_string(info.kv_bytes_per_token) + ": round-robin needs instances of one model");
    } else if (p->info.max_model_len > 0 &&
               (info.max_model_len == 0 || p->info.max_model_len < info.max_model_len)) {
      info.max_model_len = p->info.max_model_len;
    }
    at_start.push_back(std::move(p->counts));
  }
  return std::unique_ptr<HttpBenchEngine>(
      new HttpBenchEngine(std::move(config), std::move(info), std::move(at_start)));
}

HttpBenchEngine::HttpBenchEngine(HttpBenchConfig config, ServerInfo info,
                                 std::vector<MetricCounts> at_start)
    : config_(std::move(config)), info_(std::move(info)), at_start_(std::move(at_start)) {}

HttpBenchEngine::~HttpBenchEngine() {
  stopping_ = true;  // streams still running (a failed run) stop at their next bytes
  for (auto& [id, t] : threads_) {
    if (t.thread.joinable()) t.thread.join();
  }
}

Result<uint64_t> HttpBenchEngine::submit(const SubmitRequest& r) {
  json body = {{"model", info_.model},
               {"prompt", std::vector<int32_t>(r.prompt.begin(), r.prompt.end())},
               {"max_tokens", r.max_tokens},
               {"ignore_eos", r.ignore_eos},
               {"temperature", config_.temperature},
               {"seed", r.seed},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"return_token_ids", true}};
  if (r.priority != 0) body["priority"] = r.priority;
  const uint64_t id = next_id_++;
  ++num_in_flight_;
  Thread& t = threads_[id];
  t.thread = std::thread([this, id, &exited = t.exited, text = body.dump()]() mutable {
    stream(id, std::move(text));
    exited = true;
  });
  return id;
}

const std::string& HttpBenchEngine::endpoint_of(uint64_t id) const {
  return config_.endpoints[(id - 1) % config_.endpoints.size()];
}

void HttpBenchEngine::stream(uint64_t id, std::string body) {
  auto client = make_client(config_, endpoint_of(id));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = std::move(body);
  req.set_header("Content-Type", "application/json");
  int status = 0;
  std::string error_body, bad_event;
  SseReader reader;
  req.response_handler = [&status](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (stopping_) return false;
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    bad_event = reader.feed(data, n, [&](std::vector<int32_t> ids, const std::string& finish) {
      TokenEvent e;
      e.id = id;
      e.new_tokens = std::move(ids);
      e.finished = !finish.empty();
      e.cancelled = finish == "abort";
      push(std::move(e));
    });
    return bad_event.empty();
  };
  const httplib::Result res = client->send(req);
  if (stopping_) return;
  if (!bad_event.empty()) return fail(id, bad_event);
  if (!res) return fail(id, "the connection failed: " + httplib::to_string(res.error()));
  if (status != 200) return fail(id, "HTTP " + std::to_string(status) + ": " + error_body);
  if (!reader.done()) return fail(id, "the stream ended without [DONE]");
  const json& usage = reader.usage();
  std::lock_guard<std::mutex> lock(mu_);
  if (usage.is_object()) {
    totals_.num_prompt_tokens += usage.value("prompt_tokens", int64_t{0});
    totals_.num_generated_tokens += usage.value("completion_tokens", int64_t{0});
    if (const auto d = usage.find("prompt_tokens_details"); d != usage.end() && d->is_object()) {
      totals_.num_cached_prompt_tokens += d->value("cached_tokens", int64_t{0});
    }
  }
}

void HttpBenchEngine::push(TokenEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(event));
  }
  cv_.notify_one();
}

void HttpBenchEngine::fail(uint64_t id, const std::string& why) {
  TokenEvent e;
  e.id = id;
  e.finished = true;
  e.error = endpoint_of(id) + ": " + why;
  push(std::move(e));
}

Status HttpBenchEngine::step(std::vector<TokenEvent>& events, StepRecord& stats) {
  std::vector<TokenEvent> got;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, config_.poll, [this] { return !pending_.empty(); });
    got.swap(pending_);
  }
  stats.num_running = static_cast<int32_t>(num_in_flight_);
  stats.num_scheduled_seqs = static_cast<int32_t>(got.size());
  for (TokenEvent& e : got) {
    if (e.finished) --num_in_flight_;
    events.push_back(std::move(e));
  }
  // Threads whose stream is over are joined as the run goes, not all at its end.
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (!it->second.exited) {
      ++it;
      continue;
    }
    it->second.thread.join();
    it = threads_.erase(it);
  }
  return Status::Ok();
}

bool HttpBenchEngine::has_unfinished() const { return num_in_flight_ > 0; }

EngineTotals HttpBenchEngine::counters() const {
  // The usage of the last streams is counted after their final event: wait for their threads.
  for (auto& [id, t] : threads_) {
    if (t.thread.joinable()) t.thread.join();
  }
  EngineTotals c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = totals_;
  }
  c.prefix_query_tokens = c.num_prompt_tokens;
  c.prefix_hit_tokens = c.num_cached_prompt_tokens;
  for (size_t e = 0; e < config_.endpoints.size(); ++e) {
    auto client = make_client(config_, config_.endpoints[e]);
    const httplib::Result metrics = client->Get("/metrics");
    if (!metrics || metrics->status != 200) continue;
    add_metric_deltas(metric_counts(metrics->body), at_start_[e], c);
  }
  return c;
}

}  // namespace strata::bench

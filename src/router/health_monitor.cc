#include "router/health_monitor.h"

#include <httplib.h>

#include <charconv>
#include <cstdio>
#include <string>

namespace strata::router {
namespace {

// The value of the first sample of metric `name` in text, if any.
std::optional<double> sample(std::string_view text, std::string_view name) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(name) || line.size() == name.size()) continue;
    line.remove_prefix(name.size());
    if (line.front() == '{') {
      const size_t close = line.find('}');
      if (close == std::string_view::npos) continue;
      line.remove_prefix(close + 1);
    }
    if (line.empty() || line.front() != ' ') continue;
    line.remove_prefix(1);
    double v = 0;
    const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
    if (ec == std::errc()) return v;
  }
  return std::nullopt;
}

}  // namespace

int64_t reported_load_from_metrics(std::string_view text) {
  const std::optional<double> running = sample(text, "strata:num_requests_running");
  const std::optional<double> waiting = sample(text, "strata:num_requests_waiting");
  if (!running && !waiting) return -1;
  return static_cast<int64_t>(running.value_or(0) + waiting.value_or(0));
}

HealthMonitor::HealthMonitor(std::vector<Instance*> instances, std::chrono::milliseconds period)
    : instances_(std::move(instances)), period_(period), thread_([this] { run(); }) {}

HealthMonitor::~HealthMonitor() {
  {
    const std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HealthMonitor::run() {
  for (uint64_t tick = 0;; ++tick) {
    for (Instance* in : instances_) {
      httplib::Client client(in->spec.url);
      client.set_connection_timeout(std::chrono::seconds(1));
      client.set_read_timeout(std::chrono::seconds(1));
      if (tick % 2 == 0) {
        const httplib::Result h = client.Get("/health");
        const bool up = h && h->status == 200;
        if (up != in->healthy.exchange(up)) {
          std::fprintf(stderr, "strata: route: %s %s\n", in->spec.url.c_str(),
                       up ? "is back" : "is down: taken out");
        }
        if (!up) continue;
      }
      if (const httplib::Result m = client.Get("/metrics"); m && m->status == 200) {
        const int64_t load = reported_load_from_metrics(m->body);
        if (load >= 0) in->reported_load = load;
      }
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, period_, [this] { return stop_; })) return;
  }
}

}  // namespace strata::router

#pragma once
// HealthMonitor: polls every instance's /metrics every `period` (its running + waiting requests,
// the least-load tie-break) and its /health every second period; an instance whose /health does
// not answer 200 is taken out, one that answers again is put back. Request threads take an
// instance out themselves when they cannot reach it.
//
// Thread-safe: writes only the instances' atomics. The destructor stops and joins its thread
// (within one period plus a poll's timeout).

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "router/instance.h"

namespace strata::router {

// running + waiting in a Prometheus text (strata:num_requests_running and
// strata:num_requests_waiting, labels or not); -1 when neither is there.
int64_t reported_load_from_metrics(std::string_view text);

class HealthMonitor {
 public:
  HealthMonitor(std::vector<Instance*> instances, std::chrono::milliseconds period);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

 private:
  void run();

  std::vector<Instance*> instances_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace strata::router

#include "server/active_requests.h"

namespace strata::server {
namespace {

// Whether the request this handler thread is on was counted by begin().
thread_local bool t_counted = false;

}  // namespace

void ActiveRequests::begin() {
  if (t_counted) return;  // routed twice (an error handler re-entering): counted once
  t_counted = true;
  std::lock_guard<std::mutex> lock(mu_);
  ++count_;
}

void ActiveRequests::end() {
  if (!t_counted) return;
  t_counted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --count_;
  }
  cv_.notify_all();
}

int64_t ActiveRequests::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

bool ActiveRequests::wait_idle(Clock::time_point deadline, bool interruptible) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return count_ == 0 || (interruptible && cut_short_); });
  return count_ == 0;
}

void ActiveRequests::cut_short() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cut_short_ = true;
  }
  cv_.notify_all();
}

}  // namespace strata::server

#include "router/disconnect_watch.h"

#include <utility>
#include <vector>

namespace strata::router {

DisconnectWatch::DisconnectWatch(std::chrono::milliseconds period)
    : period_(period), thread_([this] { run(); }) {}

DisconnectWatch::~DisconnectWatch() {
  {
    const std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t DisconnectWatch::add(const server::HttpResponder& res, std::function<void()> on_gone) {
  const std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{&res, std::move(on_gone)});
  return id;
}

void DisconnectWatch::remove(uint64_t id) {
  const std::lock_guard lock(mu_);
  entries_.erase(id);
}

void DisconnectWatch::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period_, [this] { return stop_; });
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.res->peer_closed()) {
        it->second.on_gone();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace strata::router

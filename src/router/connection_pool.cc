#include "router/connection_pool.h"

#include <httplib.h>

#include <utility>

namespace strata::router {

ConnectionPool::ConnectionPool(std::string url, std::chrono::milliseconds timeout,
                               size_t max_idle)
    : url_(std::move(url)), timeout_(timeout), max_idle_(max_idle) {}

ConnectionPool::~ConnectionPool() = default;

ConnectionPool::Connection ConnectionPool::take(bool fresh) {
  {
    const std::lock_guard lock(mu_);
    if (!fresh && !idle_.empty()) {
      Connection c{std::move(idle_.back()), true};
      idle_.pop_back();
      return c;
    }
    ++num_opened_;
  }
  auto client = std::make_unique<httplib::Client>(url_);
  client->set_connection_timeout(timeout_);
  client->set_read_timeout(timeout_);
  client->set_write_timeout(timeout_);
  client->set_keep_alive(true);
  // The head and the body go out in two writes: on a kept connection Nagle's algorithm would hold
  // the body until the instance's delayed ACK of the head, 40 ms later.
  client->set_tcp_nodelay(true);
  return Connection{std::move(client), false};
}

void ConnectionPool::give_back(Connection c, bool clean) {
  if (!clean || c.client == nullptr || !c.client->is_socket_open()) return;  // closed here
  const std::lock_guard lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(c.client));
}

size_t ConnectionPool::num_idle() const {
  const std::lock_guard lock(mu_);
  return idle_.size();
}

int64_t ConnectionPool::num_opened() const {
  const std::lock_guard lock(mu_);
  return num_opened_;
}

}  // namespace strata::router

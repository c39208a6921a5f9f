#pragma once
// ConnectionPool: the router's keep-alive connections to one instance, reused request after
// request so that a request does not pay a TCP handshake (and the instance an accept) each time.
//
// take() hands out an idle connection, or a new one when none is idle; give_back() keeps it for
// the next request only when its last exchange ended cleanly (a whole answer read, the instance
// did not ask to close), at most max_idle of them; a connection given back with clean = false,
// or over the bound, is closed. cpp-httplib checks a kept connection before reusing it and opens
// a fresh one when the instance closed it meanwhile (its idle timeout).
//
// Thread-safe: one mutex around the idle list. A Connection is used by one thread at a time,
// except stop(), which any thread may call to abort the exchange under way (the watcher of a
// client that went away).

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace strata::router {

class ConnectionPool {
 public:
  // url: http://HOST:PORT. timeout bounds the connection and every read and write.
  ConnectionPool(std::string url, std::chrono::milliseconds timeout, size_t max_idle = 64);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  struct Connection {
    std::unique_ptr<httplib::Client> client;
    bool reused = false;  // it served an exchange before this one
  };
  // An idle connection, or a new one; with fresh, always a new one.
  Connection take(bool fresh = false);
  void give_back(Connection c, bool clean);

  const std::string& url() const { return url_; }
  size_t num_idle() const;
  // Connections opened (take() found none idle), since the start.
  int64_t num_opened() const;

 private:
  std::string url_;
  std::chrono::milliseconds timeout_;
  size_t max_idle_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;  // guarded by mu_
  int64_t num_opened_ = 0;                              // guarded by mu_
};

}  // namespace strata::router

#pragma once
// ActiveRequests: the HTTP requests the server is handling, from routing to the last byte of the
// response, so a graceful shutdown knows when in-flight work is done. cpp-httplib runs a request's
// pre-routing handler and its logger (called once the response is written, streamed bodies
// included) on the same handler thread, so begin() / end() pair up through a thread-local flag:
// requests rejected before routing (a malformed request line) are logged without ever having
// begun and are not counted.
//
// Thread-safe. wait_idle() sleeps until no request is active, the deadline passes, or
// cut_short() is called (a second SIGTERM).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace strata::server {

class ActiveRequests {
 public:
  using Clock = std::chrono::steady_clock;

  void begin();  // in the pre-routing handler
  void end();    // in the logger; no-op for a request begin() never saw on this thread
  int64_t count() const;
  // True when no request is active; false at the deadline or, when interruptible, once
  // cut_short() has been called.
  bool wait_idle(Clock::time_point deadline, bool interruptible = true);
  void cut_short();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t count_ = 0;
  bool cut_short_ = false;
};

}  // namespace strata::server

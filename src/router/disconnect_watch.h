#pragma once
// DisconnectWatch: notices clients that go away while the router waits on an instance -- for a
// plain answer the instance is still computing, or between two chunks of a stream -- and aborts
// the exchange with the instance at once, so that the instance sees its connection close and
// cancels the request (freeing its blocks) instead of computing an answer nobody reads.
//
// One thread polls every watched client's socket every `period` (poll() with no timeout, and a
// peek: HttpResponder::peer_closed) and calls the entry's on_gone once when the client has
// closed or reset its connection.
//
// Thread-safe: add() and remove() from any thread; on_gone runs on the watch's thread under its
// mutex, so once remove() returns it is not running and never will. Cost: one poll() per
// watched client per period.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "server/http_responder.h"

namespace strata::router {

class DisconnectWatch {
 public:
  explicit DisconnectWatch(std::chrono::milliseconds period);
  ~DisconnectWatch();  // stops and joins the thread (within one period)
  DisconnectWatch(const DisconnectWatch&) = delete;
  DisconnectWatch& operator=(const DisconnectWatch&) = delete;

  // res is borrowed until remove(id); on_gone must be quick and must not call add() or remove().
  uint64_t add(const server::HttpResponder& res, std::function<void()> on_gone);
  void remove(uint64_t id);

 private:
  struct Entry {
    const server::HttpResponder* res;
    std::function<void()> on_gone;
  };
  void run();

  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> entries_;  // guarded by mu_
  uint64_t next_id_ = 0;               // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  std::thread thread_;                 // last: starts after every member above exists
};

}  // namespace strata::router

#pragma once
// RedisFanOut: the round trips of one call of a store over several Redis servers (RedisShards,
// RedisCluster) -- one per server holding some of the call's keys -- run at the same time, so a
// call takes as long as its slowest server's round trip, not the sum of them.
//
//   run(n, trip)      trip(k) for every k in [0, n), at the same time on the calling thread and
//                     n - 1 pool threads (core/thread_pool.h; a thread slow to wake has its trip
//                     taken by one that is free, never run twice). Returns when every trip is
//                     done, with the error of the smallest k whose trip failed (Ok if none): the
//                     other trips' results stand. n == 1 runs trip(0) inline, no thread hop.
//   serialized(f)     f() under the fan-out's mutex: the trips hand their replies to the store's
//                     caller through it, so the caller's callbacks never run at the same time
//                     (each call sees what the one before it wrote) though on any of the threads;
//                     a long callback (a value's decode) holds the other trips' replies back.
//
// Each trip must use only its own server's RedisClient (a client is one thread's at a time) and
// must not throw (a throw on a pool thread terminates). The pool grows to the largest n asked
// for (a cluster's masters may be learnt late); its idle threads sleep.
//
// Not thread-safe: run() from one thread at a time (the store's). Cost: n == 1 nothing; else a
// wake-up of the pool's threads (a few microseconds, against milliseconds of round trip) and
// one uncontended lock per reply handed over.

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "core/status.h"
#include "core/thread_pool.h"

namespace strata::kv {

class RedisFanOut {
 public:
  Status run(size_t n, const std::function<Status(size_t)>& trip);

  template <typename F>
  void serialized(F&& f) {
    const std::lock_guard lock(callback_mu_);
    std::forward<F>(f)();
  }

 private:
  std::unique_ptr<ThreadPool> pool_;  // made on the first call with n > 1
  std::mutex callback_mu_;
};

}  // namespace strata::kv

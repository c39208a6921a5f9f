#pragma once
// HandlerPool: the threads that run request handlers which may block (a completion waits for the
// engine), fed by a bounded queue. Owns its threads; try_push is thread-safe.
//
// Also counts the requests in it (queued or running) so a graceful shutdown can wait for them:
// wait_idle() sleeps until none is left, the deadline passes, or cut_short() (a second signal).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::server {

class HandlerPool {
 public:
  using Clock = std::chrono::steady_clock;
  using Task = std::function<void()>;

  HandlerPool(int num_threads, int max_queued);
  ~HandlerPool();  // stop() and join
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Queues the task; false (and the task is dropped) when max_queued tasks already wait, or
  // after stop().
  bool try_push(Task task);
  // Tasks queued or running.
  int64_t count() const;
  int64_t num_queued() const;
  // True when no task is left; false at the deadline or, when interruptible, after cut_short().
  bool wait_idle(Clock::time_point deadline, bool interruptible = true);
  void cut_short();
  // Queued tasks are dropped (each destroyed unrun); running ones finish; threads end.
  void stop();

 private:
  void work();

  const int max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // a task arrived, or stop
  std::condition_variable idle_cv_;  // a task finished, or cut_short
  std::deque<Task> queue_;
  int64_t running_ = 0;
  bool stopping_ = false;
  bool cut_short_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::server

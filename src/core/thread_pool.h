#pragma once
// ThreadPool: a fixed set of worker threads for data-parallel loops in the CPU kernels.
//
// Owns num_threads - 1 workers; the calling thread is the last participant, so a pool of one thread
// runs everything inline with no synchronisation. parallel_for splits [0, n) into contiguous chunks,
// one per participant, and returns when all are done. Results do not depend on the thread count as
// long as each index writes only its own outputs (every kernel in src/kernels/cpu does).
//
// Hand-off: a decode step makes hundreds of parallel_for calls a few tens of microseconds apart, so
// a futex wake and join per call would eat the gain of a second thread. Workers and the caller
// therefore poll an atomic generation / pending count for a short, bounded time (kSpinMicros, with
// a pause instruction) before they block on a condition variable; an idle pool sleeps and never
// keeps a core busy for longer than that.
//
// Exceptions: fn must not throw on a worker (that terminates); one thrown on the calling thread's
// chunk is rethrown after every worker has finished. Kernels return Status and never throw.
//
// Thread-safety: parallel_for may be called from one thread at a time (the step loop). Cost: about
// a microsecond per call while the workers are polling, a wake-up (a few microseconds) after they
// have gone to sleep; kernels should still give each call enough work.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // How long a worker polls for the next job, and the caller for the workers to finish, before
  // blocking.
  static constexpr int64_t kSpinMicros = 50;

  // num_threads >= 1; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks are at least min_chunk long
  // (except the last), so tiny loops stay on one thread.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

 private:
  void worker_loop(int worker_idx);
  // Waits until generation_ != seen or stop_; returns false on stop.
  bool wait_for_job(uint64_t seen);
  void wait_for_workers();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // Job fields are written before generation_ is bumped (release) and read after it (acquire).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  // Sleepers announce themselves (seq_cst) before re-checking their condition under mutex_, so a
  // notifier that sees zero sleepers knows the sleeper will see its update.
  std::atomic<int> num_sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace strata

#pragma once
// ThreadPool: a fixed set of worker threads for data-parallel loops in the CPU kernels.
//
// Owns num_threads - 1 workers; the calling thread is the last participant, so a pool of one thread
// runs everything inline with no synchronisation. parallel_for splits [0, n) into contiguous chunks,
// one per participant, and returns when all are done. Results do not depend on the thread count as
// long as each index writes only its own outputs (every kernel in src/kernels/cpu does).
//
// Exceptions: fn must not throw on a worker (that terminates); one thrown on the calling thread's
// chunk is rethrown after every worker has finished. Kernels return Status and never throw.
//
// Thread-safety: parallel_for may be called from one thread at a time (the step loop). Cost: one
// wake-up and one join per call, a few microseconds; kernels should give each call enough work.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
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

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace strata

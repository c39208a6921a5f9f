#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <exception>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls done() for up to kSpinMicros; true when it became true. After the first few microseconds
// each round also yields, so a thread that waits never holds a core that another runnable thread
// (a pool participant when the pool has more threads than cores, or another process) needs.
template <typename Done>
bool spin_until(const Done& done) {
  const auto start = std::chrono::steady_clock::now();
  const auto yield_after = start + std::chrono::microseconds(5);
  const auto deadline = start + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return done();
    if (now >= yield_after) std::this_thread::yield();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 0; i < num_threads - 1; ++i) {
    workers_.emplace_back([this, i] { worker_loop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_chunk) {
  if (n <= 0) return;
  const int64_t participants = num_threads();
  const int64_t chunk = std::max<int64_t>(std::max<int64_t>(min_chunk, 1),
                                          (n + participants - 1) / participants);
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  if (num_chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  pending_.store(static_cast<int>(workers_.size()));
  generation_.fetch_add(1);  // seq_cst: publishes the job, ordered before the sleeper check
  if (num_sleeping_workers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  // The caller takes the last chunk index, workers take 0 .. workers-1.
  const auto caller_chunk = static_cast<int64_t>(workers_.size());
  std::exception_ptr caller_error;
  if (caller_chunk < num_chunks) {
    try {
      fn(caller_chunk * chunk, std::min(n, (caller_chunk + 1) * chunk));
    } catch (...) {
      caller_error = std::current_exception();  // rethrown once the workers are done with fn
    }
  }
  wait_for_workers();
  job_ = nullptr;
  if (caller_error) std::rethrow_exception(caller_error);
}

void ThreadPool::wait_for_workers() {
  if (spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) return;
  std::unique_lock<std::mutex> lock(mutex_);
  caller_sleeping_.store(true);
  done_.wait(lock, [this] { return pending_.load() == 0; });
  caller_sleeping_.store(false);
}

bool ThreadPool::wait_for_job(uint64_t seen) {
  const auto ready = [&] {
    return stop_.load(std::memory_order_acquire) ||
           generation_.load(std::memory_order_acquire) != seen;
  };
  if (!spin_until(ready)) {
    std::unique_lock<std::mutex> lock(mutex_);
    num_sleeping_workers_.fetch_add(1);
    wake_.wait(lock, ready);
    num_sleeping_workers_.fetch_sub(1);
  }
  return !stop_.load(std::memory_order_acquire);
}

void ThreadPool::worker_loop(int worker_idx) {
  uint64_t seen = 0;
  for (;;) {
    if (!wait_for_job(seen)) return;
    seen = generation_.load(std::memory_order_acquire);
    const std::function<void(int64_t, int64_t)>* job = job_;
    const int64_t n = job_n_;
    const int64_t chunk = job_chunk_;
    const int64_t begin = static_cast<int64_t>(worker_idx) * chunk;
    if (begin < n) (*job)(begin, std::min(n, begin + chunk));
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      done_.notify_one();
    }
  }
}

}  // namespace strata

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
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 0; i < num_threads - 1; ++i) workers_.emplace_back([this] { worker_loop(); });
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
  job_.store(&fn, std::memory_order_relaxed);
  job_n_.store(n, std::memory_order_relaxed);
  job_chunk_.store(chunk, std::memory_order_relaxed);
  chunks_done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = ++generation_ & 0xFFFFFFFFu;
  // seq_cst: publishes the job, ordered before the sleeper check below.
  claim_.store(gen << 32 | static_cast<uint64_t>(num_chunks) << kChunkBits);
  if (num_sleeping_workers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  std::exception_ptr caller_error;
  int64_t done = run_chunks(gen, &caller_error);
  if (caller_error) done += close_job(gen);  // nobody may start the rest after an error
  if (done > 0) chunks_done_.fetch_add(done, std::memory_order_acq_rel);
  wait_for_chunks(num_chunks);
  if (caller_error) std::rethrow_exception(caller_error);
}

int64_t ThreadPool::run_chunks(uint64_t gen, std::exception_ptr* error) {
  int64_t ran = 0;
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    if ((word >> 32) != gen) return ran;
    const uint64_t next = word & kChunkMask;
    if (next >= ((word >> kChunkBits) & kChunkMask)) return ran;
    // A successful claim proves the job of `gen` is still open, so the fields read here are its.
    const auto* fn = job_.load(std::memory_order_relaxed);
    const int64_t n = job_n_.load(std::memory_order_relaxed);
    const int64_t chunk = job_chunk_.load(std::memory_order_relaxed);
    if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // word now holds the current value
    }
    const int64_t begin = static_cast<int64_t>(next) * chunk;
    if (error == nullptr) {
      (*fn)(begin, std::min(n, begin + chunk));
    } else {
      try {
        (*fn)(begin, std::min(n, begin + chunk));
      } catch (...) {
        *error = std::current_exception();
        return ran + 1;
      }
    }
    ++ran;
    if (error == nullptr) {
      // A worker reports each chunk at once: the caller may be waiting for exactly this one.
      // seq_cst here and in the caller's predicate: the caller announces its sleep before it
      // re-checks the count, the worker counts before it checks for a sleeper.
      const auto num_chunks = static_cast<int64_t>((word >> kChunkBits) & kChunkMask);
      if (chunks_done_.fetch_add(1) + 1 == num_chunks && caller_sleeping_.load()) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        done_.notify_one();
      }
      ran = 0;
    }
    word = claim_.load(std::memory_order_acquire);
  }
}

int64_t ThreadPool::close_job(uint64_t gen) {
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t total = (word >> kChunkBits) & kChunkMask;
    const uint64_t next = word & kChunkMask;
    if ((word >> 32) != gen || next >= total) return 0;
    if (claim_.compare_exchange_weak(word, (word & ~kChunkMask) | total,
                                     std::memory_order_acq_rel, std::memory_order_acquire)) {
      return static_cast<int64_t>(total - next);
    }
  }
}

void ThreadPool::wait_for_chunks(int64_t num_chunks) {
  const auto all_done = [&] { return chunks_done_.load() == num_chunks; };
  if (spin_until(all_done)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  caller_sleeping_.store(true);
  done_.wait(lock, all_done);
  caller_sleeping_.store(false);
}

bool ThreadPool::wait_for_job(uint64_t seen) {
  const auto ready = [&] {
    return stop_.load(std::memory_order_acquire) ||
           (claim_.load(std::memory_order_acquire) >> 32) != seen;
  };
  if (!spin_until(ready)) {
    std::unique_lock<std::mutex> lock(mutex_);
    num_sleeping_workers_.fetch_add(1);
    wake_.wait(lock, ready);
    num_sleeping_workers_.fetch_sub(1);
  }
  return !stop_.load(std::memory_order_acquire);
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    if (!wait_for_job(seen)) return;
    seen = claim_.load(std::memory_order_acquire) >> 32;
    run_chunks(seen, nullptr);
  }
}

}  // namespace strata

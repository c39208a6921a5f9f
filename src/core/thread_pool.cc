#include "core/thread_pool.h"

#include <algorithm>
#include <exception>

namespace strata {

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
    stop_ = true;
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
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
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }
  if (caller_error) std::rethrow_exception(caller_error);
}

void ThreadPool::worker_loop(int worker_idx) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n, chunk;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunk = job_chunk_;
    }
    const int64_t begin = static_cast<int64_t>(worker_idx) * chunk;
    if (begin < n) (*job)(begin, std::min(n, begin + chunk));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace strata

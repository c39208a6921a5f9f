#include "server/handler_pool.h"

#include "core/check.h"

namespace strata::server {

HandlerPool::HandlerPool(int num_threads, int max_queued) : max_queued_(max_queued) {
  STRATA_CHECK(num_threads >= 1 && max_queued >= 0, "a handler pool needs a thread");
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { work(); });
}

HandlerPool::~HandlerPool() {
  stop();
  for (std::thread& t : threads_) t.join();
}

bool HandlerPool::try_push(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Tasks running plus waiting may reach the threads plus the queue's bound.
    const auto held = static_cast<int64_t>(queue_.size()) + running_;
    if (stopping_ || held >= static_cast<int64_t>(threads_.size()) + max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

int64_t HandlerPool::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size()) + running_;
}

int64_t HandlerPool::num_queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

bool HandlerPool::wait_idle(Clock::time_point deadline, bool interruptible) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait_until(lock, deadline, [&] {
    return (queue_.empty() && running_ == 0) || (interruptible && cut_short_);
  });
  return queue_.empty() && running_ == 0;
}

void HandlerPool::cut_short() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cut_short_ = true;
  }
  idle_cv_.notify_all();
}

void HandlerPool::stop() {
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  dropped.clear();  // outside the lock: a task's destructor may close its connection
  idle_cv_.notify_all();
}

void HandlerPool::work() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    task = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
    }
    idle_cv_.notify_all();
  }
}

}  // namespace strata::server

#include "engine/compaction_copier.h"

#include <utility>

namespace strata::engine {

CompactionCopier::CompactionCopier(CopyFn copy)
    : copy_(std::move(copy)), thread_([this] { run(); }) {}

CompactionCopier::~CompactionCopier() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return queue_.empty() && !running_job_; });
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void CompactionCopier::submit(std::vector<kv::SlotCopy> copies) {
  if (copies.empty()) return;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(copies));
  }
  work_.notify_one();
}

Status CompactionCopier::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_job_; });
  return std::exchange(error_, Status::Ok());
}

bool CompactionCopier::busy() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return !queue_.empty() || running_job_;
}

void CompactionCopier::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::vector<kv::SlotCopy> job = std::move(queue_.front());
    queue_.pop_front();
    running_job_ = true;
    lock.unlock();
    Status s = copy_(job);
    lock.lock();
    running_job_ = false;
    if (!s.ok() && error_.ok()) error_ = std::move(s);
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace strata::engine

#include "kv/tier_io.h"

#include <chrono>
#include <utility>

namespace strata::kv {

TierIo::TierIo(DiskTier& disk, int num_threads) : disk_(disk) {
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { run(); });
}

TierIo::~TierIo() {
  {
    const std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TierIo::submit(Job job) {
  ++outstanding_;
  if (job.write) ++writes_outstanding_;
  {
    const std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

std::vector<TierIo::Done> TierIo::take_done() {
  std::vector<Done> out;
  {
    const std::lock_guard lock(mu_);
    out.swap(done_);
  }
  for (const Done& d : out) {
    --outstanding_;
    if (d.job.write) --writes_outstanding_;
  }
  return out;
}

bool TierIo::wait_any() {
  if (outstanding_ == 0) return false;
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [this] { return !done_.empty(); });
  return true;
}

void TierIo::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every queued job done
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    Status status = job.write ? disk_.put(job.hash, job.tokens, job.bytes, job.checksum)
                              : disk_.get(job.hash, job.tokens, job.bytes, &job.checksum);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    {
      const std::lock_guard lock(mu_);
      done_.push_back(Done{std::move(job), std::move(status), seconds});
    }
    done_cv_.notify_all();
  }
}

}  // namespace strata::kv

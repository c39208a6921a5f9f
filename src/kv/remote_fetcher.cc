#include "kv/remote_fetcher.h"

#include <algorithm>
#include <utility>

namespace strata::kv {

RemoteFetcher::RemoteFetcher(RemoteTier& remote, int64_t block_bytes)
    : remote_(remote), block_bytes_(block_bytes), thread_([this] { run(); }) {}

RemoteFetcher::~RemoteFetcher() {
  {
    const std::lock_guard lock(mu_);
    stopping_ = true;
    queued_.clear();
  }
  work_cv_.notify_all();
  thread_.join();
}

void RemoteFetcher::submit(const std::shared_ptr<PrefetchTicket>& ticket,
                           std::span<const TierKey> keys,
                           std::span<const std::span<const int32_t>> tokens) {
  if (keys.empty()) return;
  auto job = std::make_unique<Job>();
  job->tickets.push_back(ticket);
  job->keys.assign(keys.begin(), keys.end());
  job->tokens.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    job->tokens.emplace_back(tokens[i].begin(), tokens[i].end());
    in_flight_.emplace(keys[i], job.get());
  }
  ++ticket->pending;
  ticket->blocks += static_cast<int32_t>(keys.size());
  blocks_in_flight_ += static_cast<int32_t>(keys.size());
  {
    const std::lock_guard lock(mu_);
    queued_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

bool RemoteFetcher::join(const TierKey& key, const std::shared_ptr<PrefetchTicket>& ticket) {
  const auto it = in_flight_.find(key);
  if (it == in_flight_.end()) return false;
  // The fetcher's thread reads a job's gets, never its tickets.
  std::vector<std::shared_ptr<PrefetchTicket>>& tickets = it->second->tickets;
  if (std::find(tickets.begin(), tickets.end(), ticket) == tickets.end()) {
    tickets.push_back(ticket);
    ++ticket->pending;
  }
  return true;
}

std::vector<std::unique_ptr<RemoteFetcher::Job>> RemoteFetcher::take_done(bool wait) {
  std::vector<std::unique_ptr<Job>> out;
  {
    std::unique_lock lock(mu_);
    if (wait) {
      done_cv_.wait(lock, [&] { return !done_.empty() || (queued_.empty() && reading_ == 0); });
    }
    out.swap(done_);
  }
  for (const std::unique_ptr<Job>& job : out) {
    for (const TierKey& k : job->keys) in_flight_.erase(k);
    blocks_in_flight_ -= static_cast<int32_t>(job->keys.size());
  }
  return out;
}

bool RemoteFetcher::idle() const {
  const std::lock_guard lock(mu_);
  return queued_.empty() && reading_ == 0 && done_.empty();
}

int32_t RemoteFetcher::blocks_in_flight() const { return blocks_in_flight_; }

void RemoteFetcher::run() {
  std::vector<RemoteTier::Get> gets;
  for (;;) {
    std::vector<std::unique_ptr<Job>> batch;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
      if (stopping_) return;
      while (!queued_.empty()) {
        batch.push_back(std::move(queued_.front()));
        queued_.pop_front();
      }
      reading_ = static_cast<int32_t>(batch.size());
    }
    // The blocks' buffers are made here, not on the scheduler thread that submitted the jobs;
    // then every queued job's blocks in one read.
    gets.clear();
    for (const std::unique_ptr<Job>& job : batch) {
      job->bytes.reserve(job->keys.size());
      job->gets.reserve(job->keys.size());
      for (size_t i = 0; i < job->keys.size(); ++i) {
        job->bytes.emplace_back(static_cast<size_t>(block_bytes_));
        job->gets.push_back(
            RemoteTier::Get{job->keys[i].hash, job->tokens[i], job->bytes.back(), 0, {}});
      }
      gets.insert(gets.end(), job->gets.begin(), job->gets.end());
    }
    remote_.get(gets);
    size_t at = 0;
    for (const std::unique_ptr<Job>& job : batch) {
      for (RemoteTier::Get& g : job->gets) {
        g.checksum = gets[at].checksum;
        g.status = std::move(gets[at].status);
        ++at;
      }
    }
    {
      const std::lock_guard lock(mu_);
      for (std::unique_ptr<Job>& job : batch) done_.push_back(std::move(job));
      reading_ = 0;
    }
    done_cv_.notify_all();
  }
}

}  // namespace strata::kv

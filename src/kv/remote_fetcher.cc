#include "kv/remote_fetcher.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace strata::kv {

RemoteFetcher::RemoteFetcher(BlockSource& source) : source_(source), thread_([this] { run(); }) {}

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
                           std::vector<Block> blocks,
                           std::shared_ptr<const std::atomic<bool>> producing) {
  if (blocks.empty()) return;
  auto job = std::make_unique<Job>();
  job->tickets.push_back(ticket);
  job->blocks = std::move(blocks);
  job->producing = std::move(producing);
  for (const Block& b : job->blocks) in_flight_.emplace(b.key, job.get());
  const auto n = static_cast<int32_t>(job->blocks.size());
  ++ticket->pending;
  ticket->blocks += n;
  blocks_in_flight_ += n;
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

std::vector<std::unique_ptr<RemoteFetcher::Job>> RemoteFetcher::take_done(
    bool wait, std::chrono::steady_clock::time_point until) {
  std::vector<std::unique_ptr<Job>> out;
  {
    std::unique_lock lock(mu_);
    const auto ready = [&] { return !done_.empty() || (queued_.empty() && reading_ == 0); };
    if (wait && until == std::chrono::steady_clock::time_point::max()) {
      done_cv_.wait(lock, ready);
    } else if (wait) {
      done_cv_.wait_until(lock, until, ready);
    }
    out.swap(done_);
  }
  for (const std::unique_ptr<Job>& job : out) {
    for (const Block& b : job->blocks) in_flight_.erase(b.key);
    blocks_in_flight_ -= static_cast<int32_t>(job->blocks.size());
  }
  return out;
}

bool RemoteFetcher::idle() const {
  const std::lock_guard lock(mu_);
  return queued_.empty() && reading_ == 0 && done_.empty();
}

int32_t RemoteFetcher::blocks_in_flight() const { return blocks_in_flight_; }

void RemoteFetcher::run() {
  std::vector<BlockGet> gets;
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
    // The blocks still being computed elsewhere last: the source may wait for them.
    std::stable_partition(batch.begin(), batch.end(),
                          [](const std::unique_ptr<Job>& job) { return job->producing == nullptr; });
    // Every queued job's blocks in one read, straight into their slots, a chain per job.
    gets.clear();
    int32_t chain = 0;
    for (const std::unique_ptr<Job>& job : batch) {
      job->gets.reserve(job->blocks.size());
      for (const Block& b : job->blocks) {
        job->gets.push_back(
            BlockGet{b.key.hash, b.tokens, b.out, 0, {}, chain, job->producing.get()});
      }
      gets.insert(gets.end(), job->gets.begin(), job->gets.end());
      ++chain;
    }
    const auto start = std::chrono::steady_clock::now();
    source_.get(gets);
    batch.front()->read_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    batch.front()->read_blocks = static_cast<int64_t>(gets.size());
    size_t at = 0;
    for (const std::unique_ptr<Job>& job : batch) {
      for (BlockGet& g : job->gets) {
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

#include "kv/remote_fetcher.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace strata::kv {

RemoteFetcher::RemoteFetcher(BlockSource& source, BlockSource* producing_source)
    : source_(source), producing_source_(producing_source), thread_([this] { run(); }) {
  if (producing_source_ != nullptr) producing_thread_ = std::thread([this] { run_producing(); });
}

RemoteFetcher::~RemoteFetcher() {
  {
    const std::lock_guard lock(mu_);
    stopping_ = true;
    queued_.clear();
    queued_producing_.clear();
  }
  work_cv_.notify_all();
  thread_.join();
  if (producing_thread_.joinable()) producing_thread_.join();
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
    const bool own_thread = job->producing != nullptr && producing_source_ != nullptr;
    (own_thread ? queued_producing_ : queued_).push_back(std::move(job));
  }
  work_cv_.notify_all();
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
    const auto ready = [&] {
      return !done_.empty() || (queued_.empty() && queued_producing_.empty() && reading_ == 0);
    };
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
  return queued_.empty() && queued_producing_.empty() && reading_ == 0 && done_.empty();
}

int32_t RemoteFetcher::blocks_in_flight() const { return blocks_in_flight_; }

void RemoteFetcher::read(BlockSource& source, std::vector<std::unique_ptr<Job>>& jobs,
                         std::vector<BlockGet>& gets) {
  // Every job's blocks in one read, straight into their slots, a chain per job.
  gets.clear();
  int32_t chain = 0;
  for (const std::unique_ptr<Job>& job : jobs) {
    job->gets.reserve(job->blocks.size());
    for (const Block& b : job->blocks) {
      job->gets.push_back(BlockGet{b.key.hash, b.tokens, b.out, 0, {}, chain, job->producing.get()});
    }
    gets.insert(gets.end(), job->gets.begin(), job->gets.end());
    ++chain;
  }
  const auto start = std::chrono::steady_clock::now();
  source.get(gets);
  jobs.front()->read_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  jobs.front()->read_blocks = static_cast<int64_t>(gets.size());
  size_t at = 0;
  for (const std::unique_ptr<Job>& job : jobs) {
    for (BlockGet& g : job->gets) {
      g.checksum = gets[at].checksum;
      g.status = std::move(gets[at].status);
      g.claim = std::move(gets[at].claim);
      ++at;
    }
  }
  {
    const std::lock_guard lock(mu_);
    for (std::unique_ptr<Job>& job : jobs) done_.push_back(std::move(job));
    reading_ -= static_cast<int32_t>(jobs.size());
  }
  jobs.clear();
  done_cv_.notify_all();
}

void RemoteFetcher::run() {
  std::vector<BlockGet> gets;
  std::vector<std::unique_ptr<Job>> ready, producing;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
      if (stopping_) return;
      // The jobs whose blocks are all there in one read; those still being computed elsewhere
      // after them, one read each, in the order they came (the order they are computed in).
      while (!queued_.empty()) {
        std::unique_ptr<Job>& job = queued_.front();
        (job->producing == nullptr ? ready : producing).push_back(std::move(job));
        queued_.pop_front();
      }
      reading_ += static_cast<int32_t>(ready.size() + producing.size());
    }
    if (!ready.empty()) read(source_, ready, gets);
    // A read that waits for a prefill holds only its own job: each is done as its chain ends,
    // and jobs queued meanwhile go before the rest of these (they are put back in front).
    size_t next = 0;
    while (next < producing.size()) {
      std::vector<std::unique_ptr<Job>> one;
      one.push_back(std::move(producing[next++]));
      read(source_, one, gets);
      const std::lock_guard lock(mu_);
      if (!stopping_ && queued_.empty()) continue;
      // Stopping: the rest are dropped, as queued jobs are.
      for (size_t i = producing.size(); !stopping_ && i-- > next;) {
        queued_.push_front(std::move(producing[i]));
      }
      reading_ -= static_cast<int32_t>(producing.size() - next);
      break;
    }
    producing.clear();
  }
}

void RemoteFetcher::run_producing() {
  std::vector<BlockGet> gets;
  for (;;) {
    std::vector<std::unique_ptr<Job>> one;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queued_producing_.empty(); });
      if (stopping_) return;
      one.push_back(std::move(queued_producing_.front()));
      queued_producing_.pop_front();
      ++reading_;
    }
    read(*producing_source_, one, gets);
  }
}

}  // namespace strata::kv

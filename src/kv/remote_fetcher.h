#pragma once
// RemoteFetcher: the reads of a BlockSource -- Redis, or a prefill instance -- for queued
// requests (KvTiers' prefetch), on a thread of its own. Each request's prefetch walk submits one
// job: the blocks of its prompt that neither the pool nor the host tier holds, each with the host
// slot it is read into (pinned, not committed, by the caller until the job is taken). The thread
// reads every job queued since its last read in one BlockSource::get -- for Redis one round trip
// (pipelined MGETs) for all of them -- so a burst of arrivals costs one read rather than one
// each, and a read starts as soon as the last one ends, not at a step. A job whose blocks a
// prefill instance is still computing (producing) is read on its own after those, and is done as
// soon as its own chain ends; jobs queued while it is read go before the next such job. A block
// already being read is not asked for twice: the request waits on the job reading it (join).
//
// Threads: submit, join and take_done on the scheduler thread; the reads on the fetcher's.
// Tickets are the scheduler thread's alone (the jobs hand them back through take_done). Cost: the
// values are decoded straight into the slots; nothing is allocated per block but the request.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/block_source.h"
#include "kv/tier_io.h"
#include "kv/tier_key.h"

namespace strata::kv {

class RemoteFetcher {
 public:
  // One block to read: its key, and the host slot it goes into (its token ids and bytes).
  struct Block {
    TierKey key;
    BlockId slot;
    std::span<const int32_t> tokens;
    std::span<std::byte> out;
  };
  struct Job {
    // The requests waiting for it: the one that submitted it, and those that joined.
    std::vector<std::shared_ptr<PrefetchTicket>> tickets;
    std::vector<Block> blocks;
    // While true, the blocks are still being computed by a prefill instance (BlockGet::producing).
    std::shared_ptr<const std::atomic<bool>> producing;
    // Filled in by the fetcher's thread: status and checksum of each block (gets[i] is
    // blocks[i]'s), and, on the first job of each read, the read's time and size.
    std::vector<BlockGet> gets;
    double read_seconds = 0.0;
    int64_t read_blocks = 0;
  };

  // producing_source (nullable): a second source, over connections of its own, for the jobs
  // whose blocks are still being computed (submit's producing), read on a thread of their own,
  // one job at a time in the order they came, so that a read waiting for a prefill holds back no
  // other job. Without it those jobs are read on the one thread, after the others.
  explicit RemoteFetcher(BlockSource& source, BlockSource* producing_source = nullptr);
  ~RemoteFetcher();  // waits for the reads under way; queued jobs are dropped
  RemoteFetcher(const RemoteFetcher&) = delete;
  RemoteFetcher& operator=(const RemoteFetcher&) = delete;

  // Queues a read of the blocks for ticket (its pending count goes up by one until the job is
  // taken). Their tokens and slots' bytes stay as they are until then. producing (nullable): the
  // blocks are still being computed elsewhere while it is true, and the source may wait for them;
  // such jobs are read after the others of the same read, so that the blocks already there do not
  // wait behind them.
  void submit(const std::shared_ptr<PrefetchTicket>& ticket, std::vector<Block> blocks,
              std::shared_ptr<const std::atomic<bool>> producing = nullptr);
  // Whether key is being read (queued or under way); if so, ticket waits for that job too.
  bool join(const TierKey& key, const std::shared_ptr<PrefetchTicket>& ticket);
  // The jobs read since the last call; with wait, first waits until one is, or until `until`
  // (an empty result then means none was in flight, or the time came first).
  std::vector<std::unique_ptr<Job>> take_done(
      bool wait,
      std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
  bool idle() const;                 // nothing queued, under way or left to take
  int32_t blocks_in_flight() const;  // submitted, not taken yet

 private:
  void run();
  void run_producing();  // producing_source_'s thread
  // Reads jobs (which the calling thread holds) in one source.get and moves them to done_.
  void read(BlockSource& source, std::vector<std::unique_ptr<Job>>& jobs,
            std::vector<BlockGet>& gets);

  BlockSource& source_;
  BlockSource* const producing_source_;
  mutable std::mutex mu_;  // guards what follows
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::unique_ptr<Job>> queued_;
  std::deque<std::unique_ptr<Job>> queued_producing_;  // for producing_source_'s thread
  std::vector<std::unique_ptr<Job>> done_;
  int32_t reading_ = 0;  // jobs the threads hold
  // Every block of a job not taken yet, and its job (the scheduler thread's: no lock needed).
  std::unordered_map<TierKey, Job*, TierKeyHasher> in_flight_;
  int32_t blocks_in_flight_ = 0;
  bool stopping_ = false;
  std::thread thread_;
  std::thread producing_thread_;
};

}  // namespace strata::kv

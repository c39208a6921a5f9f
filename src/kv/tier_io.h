#pragma once
// TierIo: the disk tier's reads and writes on threads of their own (docs/kv.md, "KV tiers"), so
// the scheduler thread never waits on the disk unless it chooses to. A job moves one block
// between the disk tier and a host-tier slot that the caller has pinned until the job is done;
// finished jobs are collected and handed back to the caller's thread by take_done(), which is
// where the host tier's bookkeeping happens (the I/O threads touch only the pinned bytes).
//
// Owns its threads (joined on destruction, after the jobs already queued); borrows the disk tier,
// which must outlive it. submit/take_done/wait_any are called from one thread (the scheduler's).
// Cost: one DiskTier::get or put per job; up to kThreads jobs in flight at once.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/disk_tier.h"

namespace strata::kv {

// Blocks a request's prefetch is loading from disk into the host tier (the scheduler admits the
// request once pending is 0). Read and written on the scheduler thread only.
struct PrefetchTicket {
  int32_t pending = 0;  // reads not yet finished
  int32_t blocks = 0;   // reads started
};

class TierIo {
 public:
  static constexpr int kThreads = 4;

  struct Job {
    bool write = false;           // host slot -> disk; else disk -> host slot
    BlockId slot;                 // the host slot, pinned by the caller until take_done returns it
    BlockHash hash;
    std::vector<int32_t> tokens;  // the block's token ids
    std::span<std::byte> bytes;   // the slot's bytes
    uint64_t checksum = 0;        // write: the bytes' checksum; read: filled in
    bool keep_pinned = false;     // read: the caller unpins (promote() copies the slot up first)
    std::shared_ptr<PrefetchTicket> ticket;  // read: the prefetch it belongs to, if any
  };
  struct Done {
    Job job;
    Status status;
    double seconds = 0.0;  // the job's time on its I/O thread
  };

  explicit TierIo(DiskTier& disk, int num_threads = kThreads);
  ~TierIo();
  TierIo(const TierIo&) = delete;
  TierIo& operator=(const TierIo&) = delete;

  void submit(Job job);
  // Jobs finished since the last call, in the order they finished.
  std::vector<Done> take_done();
  // Blocks until a finished job is waiting to be taken; false at once when no job is queued,
  // running or untaken.
  bool wait_any();
  // Writes submitted and not taken yet.
  int32_t writes_outstanding() const { return writes_outstanding_; }

 private:
  void run();

  DiskTier& disk_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Job> queue_;
  std::vector<Done> done_;
  bool stopping_ = false;
  int32_t outstanding_ = 0;         // caller's thread only
  int32_t writes_outstanding_ = 0;  // caller's thread only
  std::vector<std::thread> threads_;
};

}  // namespace strata::kv

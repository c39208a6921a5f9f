#pragma once
// CompactionCopier: token eviction's compaction copies (docs/kv-eviction.md, "Compaction") on a
// thread of their own, so the step thread plans a sequence's compaction at a step boundary
// (KvCacheManager::plan_compaction) and goes on -- sampling and evicting the batch's other
// sequences, answering the step, the caller's own work between steps -- while the token rows
// move. The engine waits (wait()) before its next step reads or writes any KV: before it
// schedules (admission, preemption, swaps and the KV tiers touch blocks), so the step that
// follows reads the compacted blocks as ordinary blocks.
//
// Owns one thread and a queue of copy jobs, run in submission order by `copy` (the runner's
// copy_slots). Thread-safety: submit() and wait() from one thread (the engine's); `copy` runs on
// the copier's thread, never while a wait() has returned and no new job was submitted. The
// destructor waits for the queued jobs. Cost: the copies themselves (one token row per move)
// plus a lock and a wake-up per job.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/status.h"
#include "kv/kv_group_manager.h"

namespace strata::engine {

class CompactionCopier {
 public:
  using CopyFn = std::function<Status(std::span<const kv::SlotCopy>)>;
  explicit CompactionCopier(CopyFn copy);
  ~CompactionCopier();
  CompactionCopier(const CompactionCopier&) = delete;
  CompactionCopier& operator=(const CompactionCopier&) = delete;

  // Queues the copies (in order after those queued before).
  void submit(std::vector<kv::SlotCopy> copies);
  // Blocks until every queued job has run; the first error any of them returned since the last
  // wait(), else Ok.
  [[nodiscard]] Status wait();
  // Whether a job is queued or running.
  bool busy() const;

 private:
  void run();

  CopyFn copy_;
  mutable std::mutex mu_;
  std::condition_variable work_;  // a job queued, or stopping
  std::condition_variable idle_;  // the queue drained
  std::deque<std::vector<kv::SlotCopy>> queue_;
  bool running_job_ = false;
  bool stop_ = false;
  Status error_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace strata::engine

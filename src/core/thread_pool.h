#pragma once
// ThreadPool: a fixed set of worker threads for data-parallel loops in the CPU kernels.
//
// Owns num_threads - 1 workers; the calling thread is also a participant, so a pool of one thread
// runs everything inline with no synchronisation. parallel_for splits [0, n) into contiguous
// chunks, at most one per participant, and returns when all are done. Results do not depend on
// the thread count or on which thread runs a chunk as long as each index writes only its own
// outputs (every kernel in src/kernels/cpu does).
//
// Hand-off: a decode step makes hundreds of parallel_for calls a few tens of microseconds apart.
// Participants CLAIM chunks from one atomic word (generation, chunk count, next chunk), the caller
// included, so the caller never waits for a worker that has not started: on a shared machine a
// worker the OS has descheduled simply claims nothing and the caller runs its chunk too (the
// call costs what the work costs, not a wake-up or a time slice). The caller waits only for
// chunks some worker has claimed. Idle workers poll the word for a short, bounded time
// (kSpinMicros, with a pause instruction, yielding after the first microseconds) before they
// block on a condition variable; an idle pool sleeps and never keeps a core busy.
//
// Exceptions: fn must not throw on a worker (that terminates); one thrown on the calling thread's
// chunk is rethrown after every claimed chunk has finished (chunks not yet claimed are skipped).
// Kernels return Status and never throw.
//
// Thread-safety: parallel_for may be called from one thread at a time (the step loop). Cost: well
// under a microsecond of bookkeeping per call; kernels should still give each call enough work.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // How long a worker polls for the next job, and the caller for the workers to finish, before
  // blocking.
  static constexpr int64_t kSpinMicros = 50;

  // num_threads >= 1; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks are at least min_chunk long
  // (except the last), so tiny loops stay on one thread.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

 private:
  // The claim word: generation (32 bits) | number of chunks (16 bits) | next chunk (16 bits).
  static constexpr int kChunkBits = 16;
  static constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;

  void worker_loop();
  // Waits until the generation differs from `seen` or stop_; returns false on stop.
  bool wait_for_job(uint64_t seen);
  // Claims and runs chunks of generation `gen` until none is left; returns how many it ran.
  // On the caller, an exception from fn stops the claiming and is stored in *error.
  int64_t run_chunks(uint64_t gen, std::exception_ptr* error);
  // Marks the unclaimed chunks of `gen` as done without running them; returns how many.
  int64_t close_job(uint64_t gen);
  void wait_for_chunks(int64_t num_chunks);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // Job fields, written by the caller before the claim word is published (release). A worker reads
  // them after seeing the generation (acquire) and trusts them only if its claim of a chunk of
  // that generation then succeeds: the caller rewrites them only after every chunk is done.
  std::atomic<const std::function<void(int64_t, int64_t)>*> job_{nullptr};
  std::atomic<int64_t> job_n_{0};
  std::atomic<int64_t> job_chunk_{0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> chunks_done_{0};
  uint64_t generation_ = 0;  // the caller's copy of the latest generation
  // Sleepers announce themselves (seq_cst) before re-checking their condition under mutex_, so a
  // notifier that sees zero sleepers knows the sleeper will see its update.
  std::atomic<int> num_sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace strata

#pragma once
// Scheduler: the time layer's decision of each step -- which sequences run and how many tokens
// each computes -- over the KV space layer's blocks (vLLM V1's scheduler, in a smaller form).
//
// One step, under max_num_batched_tokens (token budget) and max_num_seqs:
//   1. running sequences, in admission order: one decode token, or the next prefill chunk. A
//      sequence whose slots cannot be allocated preempts the lowest-ranked running sequence
//      (FCFS: the most recently admitted; priority: the largest (priority, arrival)), possibly
//      itself, until it fits. Preemption is by recompute: the victim's blocks go back (its full
//      blocks stay in the prefix cache) and it returns to the front of the waiting queue with
//      num_computed = 0, to be prefilled again, prompt and output so far.
//   2. unless a sequence was preempted this step, waiting sequences in queue order (FCFS:
//      arrival; priority: (priority, arrival)): the longest cached prefix is taken, and the rest
//      of the prompt is prefilled in chunks; admission needs the blocks plus a watermark of free
//      blocks, so running decodes are not starved. With the contiguous allocator, a sequence also
//      reserves max_model_len slots at admission (the baseline paging is measured against).
//   Before allocation, each KV cache group gives back the blocks no later query of the sequence
//   reads (a sliding window's past; an INT4 cache's older full-precision blocks).
// The static scheduler (baseline only) admits nothing while a batch runs: it waits for
// max_batch_size waiting sequences or batch_timeout_ms, then admits them together and keeps their
// blocks until the whole batch has finished.
//
// Borrows the sequences (the engine owns them) and the KvCacheManager. Not thread-safe. Cost per
// step: O(running + admitted sequences + blocks they allocate).

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "engine/sequence.h"
#include "kv/contiguous_allocator.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_tiers.h"
#include "strata/engine_config.h"

namespace strata::engine {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  double watermark = 0.01;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  SchedulerKind kind = SchedulerKind::kContinuous;
  int32_t max_batch_size = 32;
  double batch_timeout_s = 0.1;
  KvAllocatorKind allocator = KvAllocatorKind::kPaged;
  PreemptionMode preemption = PreemptionMode::kRecompute;
};

struct ScheduledSeq {
  Sequence* seq;
  int32_t num_tokens;  // computed this step, from position seq->num_computed
  bool first_admission;  // admitted from the waiting queue this step
  int32_t num_cached_tokens;  // prefix-cache hit taken at this admission
  bool prefill;  // counts as prefill tokens (else one decode token)
  // Of num_cached_tokens, those the KV tiers brought back (host memory, disk) for it.
  int32_t num_host_tier_tokens = 0;
  int32_t num_disk_tier_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> scheduled;
  std::vector<Sequence*> preempted;
  // Swap-outs started this step: the step waits for them before it writes any KV (the pool
  // blocks they read may have been handed to another sequence).
  std::vector<kv::SwapSpace::Transfer> swap_outs;
  int32_t num_swapped_out_blocks = 0;
  int32_t num_swapped_in_blocks = 0;  // swap-ins completed and resumed this step
  int32_t num_prefill_tokens = 0;
  int32_t num_decode_tokens = 0;
};

class Scheduler {
 public:
  // Waiting sequences, from the front, whose prefixes the KV tiers check each step for blocks to
  // prefetch from disk.
  static constexpr int32_t kPrefetchLookahead = 8;

  // swaps (one per KV cache group, moving that group's blocks) are needed for
  // PreemptionMode::kSwap only.
  Scheduler(const SchedulerConfig& config, kv::KvCacheManager& cache,
            std::vector<kv::SwapSpace*> swaps = {});

  // The KV tiers under the pool (borrowed; null = none): a waiting sequence's prefix hit goes on
  // with the chain's blocks they bring back into the pool (KvTiers::promote).
  void set_tiers(kv::KvTiers* tiers) { tiers_ = tiers; }

  // Queues a new sequence (status kWaiting, nothing computed, an empty table).
  void add_waiting(Sequence* seq);
  // Adds a sequence forked from a running one (it shares the parent's blocks) to the running set,
  // right after its parent.
  void add_forked(Sequence* seq, const Sequence* parent);
  // Takes a sequence out of whatever queue holds it and gives its blocks back (finish, cancel).
  // In a static batch, a finished sequence keeps its blocks until the batch ends.
  void finish(Sequence* seq, bool cancelled = false);

  // now: seconds on the engine's clock (the static scheduler's timeout).
  SchedulerOutput schedule(double now);

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_swapped() const { return static_cast<int32_t>(swapped_.size() + swapping_in_.size()); }
  bool empty() const {
    return running_.empty() && waiting_.empty() && batch_done_.empty() && swapped_.empty() &&
           swapping_in_.empty();
  }
  const std::deque<Sequence*>& running() const { return running_; }
  // Static scheduler: the tables of finished members of the running batch (their blocks stay
  // allocated until the batch ends). The scheduler owns them: the sequences may be gone.
  const std::vector<kv::BlockTable>& held_by_batch() const { return batch_done_; }

 private:
  bool ranks_before(const Sequence* a, const Sequence* b) const;
  void insert_waiting(Sequence* seq);
  // Tokens a sequence has left to compute; the running ones' prompt tokens left (a prefetch's
  // tokens_ahead counts these and the waiting sequences' before it).
  static int64_t uncomputed_tokens(const Sequence& seq);
  int64_t uncomputed_running_tokens() const;
  Sequence* pick_victim() const;
  void preempt(Sequence* victim, SchedulerOutput& out);
  // Starts the victim's swap-out; false (nothing changed) when the swap space is short.
  bool swap_out(Sequence* victim, SchedulerOutput& out);
  // Swapped sequences whose copies are done rejoin the running set; then, blocks permitting,
  // more swapped sequences start coming back.
  void resume_swapped_in(SchedulerOutput& out);
  void start_swap_ins();
  void drop_swapped(Sequence* seq);
  void release(Sequence* seq);
  void release(kv::BlockTable& table, int64_t& contiguous_offset);
  // Tokens a running sequence computes next (1 for a decode), at most budget for a prefill.
  int32_t next_chunk(const Sequence& seq, int32_t budget) const;
  void schedule_running(SchedulerOutput& out, int32_t& budget);
  // Returns how many sequences it admitted.
  int32_t schedule_waiting(SchedulerOutput& out, int32_t& budget, int32_t max_admit);
  static int32_t scheduled_tokens(const SchedulerOutput& out, const Sequence* seq);
  bool static_batch_ready(double now) const;

  SchedulerConfig config_;
  kv::KvCacheManager& cache_;
  std::optional<kv::ContiguousAllocator> contiguous_;
  std::deque<Sequence*> waiting_;  // sorted by rank
  std::deque<Sequence*> running_;  // admission order
  std::deque<Sequence*> swapped_;  // sorted by rank
  std::deque<Sequence*> swapping_in_;  // copies in flight, in start order
  std::vector<kv::SwapSpace*> swaps_;       // per group; empty without swap preemption
  kv::KvTiers* tiers_ = nullptr;
  std::vector<kv::BlockTable> batch_done_;  // static scheduler: finished members' blocks
  std::vector<int64_t> batch_done_offsets_;  // and their contiguous reservations
  int32_t static_admit_left_ = 0;  // members of the forming static batch not yet admitted
};

}  // namespace strata::engine

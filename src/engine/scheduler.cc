#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata::engine {

Scheduler::Scheduler(const SchedulerConfig& config, kv::KvCacheManager& cache,
                     std::vector<kv::SwapSpace*> swaps)
    : config_(config), cache_(cache), swaps_(std::move(swaps)) {
  STRATA_CHECK(config.preemption == PreemptionMode::kRecompute ||
                   static_cast<int32_t>(swaps_.size()) == cache.num_groups(),
               "swap preemption needs a swap space per KV cache group");
  STRATA_CHECK(config.max_num_seqs >= 1 && config.max_num_batched_tokens >= 1,
               "scheduler budgets must be positive");
  if (config_.allocator == KvAllocatorKind::kContiguous) {
    contiguous_.emplace(static_cast<int64_t>(cache.pool().num_blocks() - 1) * cache.block_size());
  }
}

bool Scheduler::ranks_before(const Sequence* a, const Sequence* b) const {
  if (config_.policy == SchedulingPolicy::kPriority && a->priority != b->priority) {
    return a->priority < b->priority;
  }
  if (a->arrival_order != b->arrival_order) return a->arrival_order < b->arrival_order;
  return a->index < b->index;
}

void Scheduler::insert_waiting(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  const auto at = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                                   [this](const Sequence* a, const Sequence* b) {
                                     return ranks_before(a, b);
                                   });
  waiting_.insert(at, seq);
}

void Scheduler::add_waiting(Sequence* seq) {
  STRATA_CHECK(seq->num_computed == 0 && seq->table.num_tokens() == 0,
               "a new sequence has nothing computed");
  insert_waiting(seq);
  if (tiers_ != nullptr && !seq->wants_all_rows()) {
    int64_t ahead = uncomputed_running_tokens();
    for (const Sequence* s : waiting_) {
      if (s == seq) break;
      ahead += uncomputed_tokens(*s);
    }
    seq->prefetch.tokens_ahead = ahead;
    tiers_->prefetch(seq->tokens, seq->cache_keys, seq->prefetch);
  }
}

int64_t Scheduler::uncomputed_tokens(const Sequence& seq) {
  return static_cast<int64_t>(seq.tokens.size()) - seq.num_computed;
}

int64_t Scheduler::uncomputed_running_tokens() const {
  int64_t n = 0;
  for (const Sequence* s : running_) n += std::max<int64_t>(0, s->num_prompt - s->num_computed);
  return n;
}

void Scheduler::add_forked(Sequence* seq, const Sequence* parent) {
  const auto it = std::find(running_.begin(), running_.end(), parent);
  STRATA_CHECK(it != running_.end(), "fork of a sequence that is not running");
  seq->status = SeqStatus::kRunning;
  running_.insert(it + 1, seq);
}

void Scheduler::release(Sequence* seq) { release(seq->table, seq->contiguous_offset); }

void Scheduler::release(kv::BlockTable& table, int64_t& contiguous_offset) {
  cache_.free(table);
  if (contiguous_ && contiguous_offset >= 0) {
    contiguous_->release(contiguous_offset, config_.max_model_len);
    contiguous_offset = -1;
  }
}

void Scheduler::drop_swapped(Sequence* seq) {
  for (const Sequence::SwappedRow& r : seq->swapped) r.transfer->wait();  // no copy into a reused block
  if (seq->status == SeqStatus::kSwapped) {
    swapped_.erase(std::find(swapped_.begin(), swapped_.end(), seq));
  } else {
    swapping_in_.erase(std::find(swapping_in_.begin(), swapping_in_.end(), seq));
    for (size_t g = 0; g < seq->swapped.size(); ++g) {
      cache_.pool(static_cast<int32_t>(g)).free(seq->swapped[g].swap_in_blocks);
    }
  }
  for (size_t g = 0; g < seq->swapped.size(); ++g) {
    swaps_[g]->free(seq->swapped[g].transfer->swap_blocks);
  }
  seq->swapped.clear();
}

void Scheduler::finish(Sequence* seq, bool cancelled) {
  const SeqStatus was = seq->status;
  if (was == SeqStatus::kSwapped || was == SeqStatus::kSwappingIn) {
    drop_swapped(seq);
    seq->status = SeqStatus::kFinished;
    return;
  }
  seq->status = SeqStatus::kFinished;
  if (was == SeqStatus::kWaiting) {
    const auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
    if (tiers_ != nullptr) tiers_->cancel_promotion(seq);
    release(seq);
    return;
  }
  const auto it = std::find(running_.begin(), running_.end(), seq);
  if (it == running_.end()) return;  // finished before, held by a static batch
  running_.erase(it);
  if (config_.kind == SchedulerKind::kStatic && !cancelled) {
    // Padding: the batch keeps its blocks (and reservation) until it ends.
    batch_done_.push_back(std::exchange(seq->table, kv::BlockTable(seq->table.block_size())));
    batch_done_offsets_.push_back(std::exchange(seq->contiguous_offset, -1));
  } else {
    release(seq);
  }
  if (config_.kind == SchedulerKind::kStatic && running_.empty()) {
    for (size_t i = 0; i < batch_done_.size(); ++i) release(batch_done_[i], batch_done_offsets_[i]);
    batch_done_.clear();
    batch_done_offsets_.clear();
  }
}

Sequence* Scheduler::pick_victim() const {
  if (running_.empty()) return nullptr;
  if (config_.policy == SchedulingPolicy::kFcfs) return running_.back();
  return *std::max_element(running_.begin(), running_.end(),
                           [this](const Sequence* a, const Sequence* b) {
                             return ranks_before(a, b);
                           });
}

bool Scheduler::swap_out(Sequence* victim, SchedulerOutput& out) {
  // Per group, only the computed positions' blocks a later query reads (a victim scheduled
  // earlier in this step has slots for tokens it will not compute now).
  std::vector<Sequence::SwappedRow> rows(static_cast<size_t>(cache_.num_groups()));
  std::vector<std::vector<BlockId>> live(rows.size());
  for (int32_t g = 0; g < cache_.num_groups(); ++g) {
    const auto i = static_cast<size_t>(g);
    // Slots, not positions: token eviction took num_evicted_tokens() of them out.
    rows[i].layout = cache_.blocks_to_swap(
        victim->table, g, victim->num_computed - victim->table.num_evicted_tokens());
    for (const BlockId b : rows[i].layout) {
      if (b != kNullBlock) live[i].push_back(b);
    }
    if (swaps_[i]->num_free_blocks() < static_cast<int32_t>(live[i].size())) return false;
  }
  for (size_t g = 0; g < rows.size(); ++g) {
    std::optional<kv::SwapSpace::Transfer> t = swaps_[g]->swap_out(live[g]);
    STRATA_CHECK(t.has_value(), "swap-out failed after its free-block check");
    out.swap_outs.push_back(*t);
    rows[g].transfer = std::move(t);
  }
  out.num_swapped_out_blocks += static_cast<int32_t>(live[0].size());
  victim->swapped = std::move(rows);
  release(victim);  // the blocks may be reallocated now; the step waits for the copy first
  victim->status = SeqStatus::kSwapped;
  const auto at = std::upper_bound(swapped_.begin(), swapped_.end(), victim,
                                   [this](const Sequence* a, const Sequence* b) {
                                     return ranks_before(a, b);
                                   });
  swapped_.insert(at, victim);
  return true;
}

void Scheduler::preempt(Sequence* victim, SchedulerOutput& out) {
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  ++victim->num_preemptions;
  out.preempted.push_back(victim);
  if (config_.preemption != PreemptionMode::kSwap || victim->num_computed == 0 ||
      !swap_out(victim, out)) {
    release(victim);  // recompute (also when the swap space is full)
    victim->num_computed = 0;
    victim->num_evictions_applied = 0;  // its evictions are made again at the same points
    victim->block_scores.clear();
    victim->slot_positions.clear();
    victim->slot_mass.clear();
    victim->head_mass.clear();
    victim->head_positions.clear();
    victim->prefix_looked_up = false;
    insert_waiting(victim);
  }
  if (config_.kind == SchedulerKind::kStatic) ++static_admit_left_;  // still a batch member
  // A victim scheduled earlier in this step (priority policy) gives its tokens back.
  const auto it = std::find_if(out.scheduled.begin(), out.scheduled.end(),
                               [victim](const ScheduledSeq& s) { return s.seq == victim; });
  if (it != out.scheduled.end()) {
    (it->prefill ? out.num_prefill_tokens : out.num_decode_tokens) -= it->num_tokens;
    out.scheduled.erase(it);
  }
}

int32_t Scheduler::next_chunk(const Sequence& seq, int32_t budget) const {
  // A recompute stops at each eviction it repeats (the engine evicts after that step).
  const int32_t remaining = seq.next_eviction_stop() - seq.num_computed;
  if (seq.num_computed >= seq.num_prompt && remaining == 1) return 1;  // decode
  return std::min(
      {remaining, budget,
       seq.eviction_chunk_limit(seq.num_computed, cache_.block_size(), seq.table.num_tokens())});
}

void Scheduler::schedule_running(SchedulerOutput& out, int32_t& budget) {
  // Walks a snapshot: preemption removes sequences from running_, possibly ones already scheduled
  // this step (priority policy), whose tokens then go back to the budget.
  const std::vector<Sequence*> order(running_.begin(), running_.end());
  for (Sequence* seq : order) {
    if (budget <= 0) break;
    if (seq->status != SeqStatus::kRunning) continue;  // preempted by an earlier sequence
    const int32_t n = next_chunk(*seq, budget);
    bool preempted_self = false;
    while (!cache_.allocate_slots(seq->table, n)) {
      Sequence* victim = pick_victim();
      const int32_t refund = scheduled_tokens(out, victim);
      preempt(victim, out);
      budget += refund;
      if (victim == seq) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) continue;
    const bool prefill = seq->num_computed < seq->num_prompt || n > 1;
    out.scheduled.push_back({seq, n, false, 0, prefill});
    (prefill ? out.num_prefill_tokens : out.num_decode_tokens) += n;
    budget -= n;
  }
}

int32_t Scheduler::scheduled_tokens(const SchedulerOutput& out, const Sequence* seq) {
  for (const ScheduledSeq& s : out.scheduled) {
    if (s.seq == seq) return s.num_tokens;
  }
  return 0;
}

int32_t Scheduler::schedule_waiting(SchedulerOutput& out, int32_t& budget, int32_t max_admit) {
  int32_t admitted = 0;
  // In order. A sequence whose prefix is still coming from disk, or still copying up into the
  // pool, holds the queue (those behind it would evict its pool-resident prefix) but not the
  // running ones: they step on meanwhile.
  auto next = waiting_.begin();
  while (next != waiting_.end() && budget > 0 && admitted < max_admit &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = *next;
    // Reads from Redis that are not done when computing the blocks would have been go on for
    // whoever needs the blocks next; this request is computed.
    if (seq->prefetch.pending() && (tiers_ == nullptr || !tiers_->abandon_overdue(seq->prefetch))) {
      break;
    }
    if (tiers_ != nullptr && tiers_->promotion_pending(seq)) break;
    kv::PrefixHit hit;
    if (!seq->wants_all_rows()) {
      // Under token eviction only what precedes the first eviction point is any run's prefix.
      const std::span<const int32_t> tokens(
          seq->tokens.data(), static_cast<size_t>(seq->num_cacheable_tokens(cache_.block_size())));
      hit = cache_.find_cached_prefix(tokens, seq->cache_keys);
      if (tiers_ != nullptr) {
        const kv::KvTiers::Progress up = tiers_->promote_async(seq, tokens, seq->cache_keys, hit);
        seq->num_host_tier_tokens += up.promoted.host_blocks * cache_.block_size();
        seq->num_disk_tier_tokens += up.promoted.disk_blocks * cache_.block_size();
        if (up.pending) break;
      }
    }
    const int32_t remaining = seq->next_eviction_stop() - hit.num_tokens;
    const int32_t n =
        std::min({remaining, budget,
                  seq->eviction_chunk_limit(hit.num_tokens, cache_.block_size(), hit.num_tokens)});
    // The watermark keeps room for running sequences' next tokens; with none running, a request
    // the pool holds (validate_request) must not wait on it forever.
    const double watermark = running_.empty() ? 0.0 : config_.watermark;
    if (!cache_.can_allocate(seq->table, n, &hit, watermark)) break;
    if (contiguous_) {
      const std::optional<int64_t> offset = contiguous_->reserve(config_.max_model_len);
      if (!offset) break;
      seq->contiguous_offset = *offset;
    }
    STRATA_CHECK(cache_.allocate_slots(seq->table, n, &hit), "admission after can_allocate failed");
    next = waiting_.erase(next);
    seq->prefetch = {};
    seq->prefix_looked_up = true;
    seq->num_computed = hit.num_tokens;
    seq->status = SeqStatus::kRunning;
    running_.push_back(seq);
    const int32_t host = std::min(seq->num_host_tier_tokens, hit.num_tokens);
    const int32_t disk = std::min(seq->num_disk_tier_tokens, hit.num_tokens - host);
    out.scheduled.push_back({seq, n, true, hit.num_tokens, true, host, disk});
    out.num_prefill_tokens += n;
    budget -= n;
    ++admitted;
  }
  return admitted;
}

bool Scheduler::static_batch_ready(double now) const {
  if (!running_.empty() || !batch_done_.empty() || waiting_.empty() || static_admit_left_ > 0) {
    return false;
  }
  if (static_cast<int32_t>(waiting_.size()) >= config_.max_batch_size) return true;
  double oldest = waiting_.front()->arrival_time;
  for (const Sequence* s : waiting_) oldest = std::min(oldest, s->arrival_time);
  return now - oldest >= config_.batch_timeout_s;
}

void Scheduler::resume_swapped_in(SchedulerOutput& out) {
  auto ready = [](const Sequence* seq) {
    return std::all_of(seq->swapped.begin(), seq->swapped.end(),
                       [](const Sequence::SwappedRow& r) { return r.transfer->ready(); });
  };
  while (!swapping_in_.empty() && ready(swapping_in_.front())) {
    Sequence* seq = swapping_in_.front();
    swapping_in_.pop_front();
    out.num_swapped_in_blocks += static_cast<int32_t>(seq->swapped[0].swap_in_blocks.size());
    // Each row's entries: the new blocks in place of the swapped ones, nulls where they were.
    std::vector<std::vector<BlockId>> rows;
    for (size_t g = 0; g < seq->swapped.size(); ++g) {
      Sequence::SwappedRow& r = seq->swapped[g];
      swaps_[g]->free(r.transfer->swap_blocks);
      std::vector<BlockId> blocks = std::move(r.layout);
      size_t next = 0;
      for (BlockId& b : blocks) {
        if (b != kNullBlock) b = r.swap_in_blocks[next++];
      }
      rows.push_back(std::move(blocks));
    }
    const int32_t evicted = seq->num_evicted_tokens(cache_.block_size());
    cache_.adopt_blocks(seq->table, std::move(rows), seq->num_computed - evicted, evicted);
    seq->swapped.clear();
    seq->status = SeqStatus::kRunning;
    running_.push_back(seq);
  }
}

void Scheduler::start_swap_ins() {
  while (!swapped_.empty() &&
         static_cast<int32_t>(running_.size() + swapping_in_.size()) < config_.max_num_seqs) {
    Sequence* seq = swapped_.front();
    bool fits = true;
    for (size_t g = 0; g < seq->swapped.size(); ++g) {
      const auto gi = static_cast<int32_t>(g);
      const auto needed = static_cast<int32_t>(seq->swapped[g].transfer->swap_blocks.size());
      fits = fits && needed <= cache_.pool(gi).num_free_blocks() - cache_.watermark_blocks(gi, config_.watermark);
    }
    if (!fits) break;
    swapped_.pop_front();
    for (size_t g = 0; g < seq->swapped.size(); ++g) {
      Sequence::SwappedRow& r = seq->swapped[g];
      const std::vector<BlockId> swap_blocks = r.transfer->swap_blocks;
      std::optional<std::vector<BlockId>> blocks =
          cache_.pool(static_cast<int32_t>(g)).allocate(static_cast<int32_t>(swap_blocks.size()));
      STRATA_CHECK(blocks.has_value(), "swap-in allocation failed after the free-block check");
      r.swap_in_blocks = std::move(*blocks);
      r.transfer = swaps_[g]->swap_in(swap_blocks, r.swap_in_blocks);
    }
    seq->status = SeqStatus::kSwappingIn;
    swapping_in_.push_back(seq);
  }
}

SchedulerOutput Scheduler::schedule(double now) {
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;
  if (tiers_ != nullptr) {
    tiers_->poll();
    // The next sequences to be admitted: what of their prefixes went to disk since they were
    // queued starts loading.
    int32_t looked = 0;
    int64_t ahead = uncomputed_running_tokens();
    for (Sequence* seq : waiting_) {
      if (looked++ == kPrefetchLookahead) break;
      if (!seq->wants_all_rows()) {
        seq->prefetch.tokens_ahead = ahead;
        tiers_->prefetch(seq->tokens, seq->cache_keys, seq->prefetch);
      }
      ahead += uncomputed_tokens(*seq);
    }
  }
  if (!swaps_.empty()) resume_swapped_in(out);
  schedule_running(out, budget);
  if (!out.preempted.empty()) return out;
  if (!swaps_.empty()) {
    start_swap_ins();
    if (!swapped_.empty()) return out;  // swapped sequences come back before new ones start
  }
  if (config_.kind == SchedulerKind::kContinuous) {
    schedule_waiting(out, budget, config_.max_num_seqs);
    // Nothing to run but prefixes coming up or from disk: wait for them rather than spin.
    if (out.scheduled.empty() && running_.empty() && !waiting_.empty() && tiers_ != nullptr) {
      if (tiers_->promotion_under_way()) {
        tiers_->wait_promotion();
      } else {
        // At most until the head's reads are overdue: then it is computed.
        tiers_->wait_io(waiting_.front()->prefetch.deadline);
      }
    }
    return out;
  }
  // Static: form a batch of the first max_batch_size waiting sequences, then admit its members
  // (over several steps if the token budget is short) and nobody else until it has finished.
  if (static_batch_ready(now)) {
    static_admit_left_ = std::min(config_.max_batch_size, static_cast<int32_t>(waiting_.size()));
  }
  if (static_admit_left_ > 0) {
    static_admit_left_ -= schedule_waiting(out, budget, static_admit_left_);
  }
  return out;
}

}  // namespace strata::engine

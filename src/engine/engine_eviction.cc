// Token eviction in the step loop (docs/kv-eviction.md): after a step, a sequence past its
// prompt whose table holds more slots than its budget gives whole blocks back, as its policy
// (kv/kv_eviction.h) chooses; a recompute after preemption repeats the recorded evictions at the
// same points instead, so it makes the same K/V as the run it replaces.

#include <algorithm>

#include "engine/engine_impl.h"
#include "kv/block_copy.h"
#include "kv/kv_eviction.h"

namespace strata {

using engine::Sequence;

int32_t EngineImpl::eviction_prefill_interval() const {
  if (config_.kv_eviction_prefill_interval_tokens > 0) {
    return config_.kv_eviction_prefill_interval_tokens;
  }
  return config_.device == Device::kCpu ? config_.block_size : 512;
}

Status EngineImpl::check_eviction(const ResolvedKvEviction& e) const {
  if (!e.active()) return Status::Ok();
  const std::string what = std::string("kv_eviction policy ") + kv_eviction_policy_name(e.policy);
  // StreamingLLM's choice is positional and only frees blocks, which the GPU runner reads through
  // the block table like any other. The others read the pool on the host (PagedEviction's
  // scores) or need the attention mass and slot copies that only the CPU runner has.
  if (config_.device != Device::kCpu && e.policy != KvEvictionPolicy::kStreamingLlm) {
    return Status::InvalidArgument(what +
                                   " runs on the CPU engine only; on the GPU, streaming_llm runs");
  }
  if (cache_->num_groups() != 1 || cache_->group_spec(0).kind != kv::KvGroupKind::kFullAttention) {
    return Status::InvalidArgument(
        what + " needs a KV cache of one full-attention group; this model's cache has " +
        std::to_string(cache_->num_groups()) + " group(s), the first " +
        kv::kv_group_kind_name(cache_->group_spec(0).kind) +
        " (sliding-window layers, an int4 cache's newest blocks)");
  }
  if (is_token_level(e.policy) && !kv::can_copy_slots(runner_->kv_layout(0))) {
    return Status::InvalidArgument(what +
                                   " moves single tokens; an int4 KV cache moves whole blocks");
  }
  // MLA's latent row is K and V at once: ||V|| / ||K|| would be 1 for every token.
  if (e.policy == KvEvictionPolicy::kPagedEviction && runner_->kv_layout(0).spec().latent) {
    return Status::InvalidArgument(
        what + " scores a block by ||V|| / ||K||; an MLA latent cache holds one vector for both");
  }
  if (e.policy == KvEvictionPolicy::kPagedEviction &&
      !kv::can_score_blocks(runner_->kv_layout(0))) {
    return Status::InvalidArgument(
        what +
        " scores blocks from float, fp8 or int8 K/V; this pool has int4 layers "
        "(--kv-cache-dtype)");
  }
  return Status::Ok();
}

Status EngineImpl::check_default_eviction() const {
  Result<ResolvedKvEviction> e = resolve_kv_eviction(std::nullopt, config_.kv_eviction);
  if (!e.ok()) return e.status();
  return check_eviction(*e);
}

std::vector<float> EngineImpl::block_scores(Sequence& s) {
  // A full block's K/V never change, so its score is computed once (Sequence::block_scores);
  // only the blocks filled since the last eviction are copied out and read.
  const std::span<const BlockId> row = s.table.blocks();
  const int32_t bs = config_.block_size;
  const int32_t num_full = s.table.num_tokens() / bs;
  const auto from = static_cast<int32_t>(s.block_scores.size());
  STRATA_CHECK(from <= num_full, "more cached block scores than full blocks");
  const int32_t n = num_full - from;
  if (n > 0) {
    const kv::KvLayout& layout = runner_->kv_layout(0);
    if (score_mover_ == nullptr) score_mover_ = runner_->new_block_mover(0);
    if (score_buffer_ == nullptr || score_buffer_->num_blocks() < n) {
      if (score_buffer_ != nullptr) score_mover_->detach(*score_buffer_);
      score_buffer_ = std::make_unique<kv::HostKvBuffer>(layout, std::max(n, 64));
      score_mover_->attach(*score_buffer_);
    }
    std::vector<kv::BlockCopy> pairs;
    pairs.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i)
      pairs.push_back({row[static_cast<size_t>(from) + i], BlockId{i}});
    score_mover_->to_host(pairs, *score_buffer_);
    for (int32_t i = 0; i < n; ++i) {
      s.block_scores.push_back(kv::block_value_key_ratio(
          layout, score_buffer_->data() + static_cast<int64_t>(i) * layout.block_bytes(), bs));
    }
  }
  std::vector<float> scores = s.block_scores;
  scores.resize(row.size(), 0.0f);  // a partly filled newest block: never a candidate
  return scores;
}

void EngineImpl::evict(Sequence& s, std::span<const int32_t> entries) {
  cache_->evict_blocks(s.table, entries);
  // Entries are ascending: erasing from the last keeps the earlier ones' indices.
  for (size_t k = entries.size(); k-- > 0;) {
    if (static_cast<size_t>(entries[k]) < s.block_scores.size()) {
      s.block_scores.erase(s.block_scores.begin() + entries[k]);
    }
  }
}

Status EngineImpl::run_compaction(kv::CompactionPlan plan) {
  if (!config_.kv_compaction_copy_thread) {
    // Now, before the pool allocates again: the sources may lie in the blocks given back.
    cache_->release_compacted(plan);
    return runner_->copy_slots(plan.copies);
  }
  // Nothing reads or writes the pool until the next step schedules (finish_compactions), and
  // the plan keeps the blocks given up, the sources among them, from being allocated meanwhile.
  // The step's copies go to the copier together once its sequences are consumed
  // (start_compactions): one wake-up a step, not one per sequence.
  step_copies_.insert(step_copies_.end(), plan.copies.begin(), plan.copies.end());
  plan.copies.clear();
  compacting_.push_back(std::move(plan));
  return Status::Ok();
}

void EngineImpl::start_compactions() {
  if (step_copies_.empty()) return;
  if (copier_ == nullptr) {
    copier_ = std::make_unique<engine::CompactionCopier>(
        [runner = runner_.get()](std::span<const kv::SlotCopy> copies) {
          return runner->copy_slots(copies);
        });
  }
  copier_->submit(std::move(step_copies_));
  step_copies_.clear();
}

Status EngineImpl::finish_compactions() {
  if (compacting_.empty()) return Status::Ok();
  start_compactions();  // a step that ended early leaves its copies unsubmitted
  Status copied = copier_ != nullptr ? copier_->wait() : Status::Ok();
  for (kv::CompactionPlan& plan : compacting_) cache_->release_compacted(plan);
  compacting_.clear();
  return copied;
}

int32_t EngineImpl::num_compacting_blocks() const {
  size_t n = 0;
  for (const kv::CompactionPlan& plan : compacting_) n += plan.released.size();
  return static_cast<int32_t>(n);
}

Status EngineImpl::evict_slots(Sequence& s, std::span<const int32_t> slots) {
  STRATA_RETURN_IF_ERROR(run_compaction(cache_->plan_compaction(s.table, slots)));
  kv::compact_slot_values(s.slot_positions, slots);
  kv::compact_slot_values(s.slot_mass, slots);
  return Status::Ok();
}

Status EngineImpl::evict_head_slots(Sequence& s, std::span<const std::vector<int32_t>> head_slots) {
  STRATA_RETURN_IF_ERROR(run_compaction(cache_->plan_head_compaction(s.table, head_slots)));
  // SnapKV evicts once, from a table where slot i held position i in every head; from now on
  // each head's slots hold their own positions.
  if (s.head_positions.empty()) s.head_positions.assign(head_slots.size(), s.slot_positions);
  for (size_t h = 0; h < head_slots.size(); ++h) {
    kv::compact_slot_values(s.head_positions[h], head_slots[h]);
  }
  s.slot_positions.clear();
  s.slot_mass.resize(static_cast<size_t>(s.table.num_tokens()));
  s.head_mass.clear();  // read once, at this eviction
  return Status::Ok();
}

namespace {

// Token-level policies: a position and a mass for every slot of the table (per head once SnapKV
// has chosen per head); the slots appended since the last eviction hold the next positions in
// order.
void extend_slots(Sequence& s) {
  const int32_t held = s.table.num_tokens();
  const auto extend = [&](std::vector<int32_t>& positions) {
    for (auto i = static_cast<int32_t>(positions.size()); i < held; ++i) {
      positions.push_back(i + s.table.num_evicted_tokens());
    }
  };
  if (s.head_positions.empty()) extend(s.slot_positions);
  for (std::vector<int32_t>& positions : s.head_positions) extend(positions);
  s.slot_mass.resize(static_cast<size_t>(held), 0.0f);
}

// What the same evictions would hold without compaction: every block of positions that still
// has a live one (in any head: a block holds every head's K/V of its positions).
int32_t blocks_without_compaction(const Sequence& s, int32_t block_size) {
  const int32_t length = s.table.num_tokens() + s.table.num_evicted_tokens();
  std::vector<uint8_t> live(static_cast<size_t>((length + block_size - 1) / block_size), 0);
  int32_t blocks = 0;
  const auto mark = [&](const std::vector<int32_t>& positions) {
    for (const int32_t p : positions) {
      uint8_t& b = live[static_cast<size_t>(p / block_size)];
      blocks += 1 - b;
      b = 1;
    }
  };
  mark(s.slot_positions);
  for (const std::vector<int32_t>& positions : s.head_positions) mark(positions);
  return blocks;
}

// SnapKV's score of each slot from the window's mass over them (the slots before its selection
// point `end`, slot i holding position i: nothing went before): pooled over those before the
// window, 0 for the window and past it (protected).
std::vector<float> snapkv_scores(const ResolvedKvEviction& e, std::span<const float> mass,
                                 int32_t end, int32_t held) {
  const int32_t prefix = std::max(end - e.window_tokens, 0);
  std::vector<float> scores =
      kv::pool_scores(mass.first(static_cast<size_t>(prefix)), e.pool_kernel, e.pooling);
  scores.resize(static_cast<size_t>(held), 0.0f);
  return scores;
}

}  // namespace

std::vector<uint8_t> EngineImpl::locked_slots(const Sequence& s) const {
  const int32_t bs = config_.block_size;
  const auto held = static_cast<size_t>(s.table.num_tokens());
  std::vector<uint8_t> locked(held, 0);
  const std::span<const BlockId> row = s.table.blocks();
  for (size_t b = 0; b < row.size(); ++b) {
    if (cache_->pool().ref_count(row[b]) <= 1) continue;
    const size_t first = b * static_cast<size_t>(bs);
    const size_t last = std::min(first + static_cast<size_t>(bs), held);
    std::fill(locked.begin() + static_cast<std::ptrdiff_t>(first),
              locked.begin() + static_cast<std::ptrdiff_t>(last), uint8_t{1});
  }
  return locked;
}

std::vector<int32_t> EngineImpl::choose_slots(const Sequence& s) const {
  const int32_t interval = s.eviction.prefill_interval(config_.block_size);
  const int32_t held = s.table.num_tokens();
  const bool snap = s.eviction.policy == KvEvictionPolicy::kSnapKv;
  // H2O: at multiples of the prefill interval in the prompt, its end, and after every decode
  // step. SnapKV: once, at the prompt's end.
  const bool at_point = snap ? s.num_computed == s.snapkv_end() && s.evictions.empty()
                             : s.num_computed >= s.num_prompt || s.num_computed % interval == 0;
  if (!at_point || held <= s.eviction.budget_tokens) return {};
  // A block shared with another table (a fork's) is never written: its tokens stay.
  const std::vector<uint8_t> locked = locked_slots(s);
  if (!snap) {
    return kv::choose_evicted_tokens(s.eviction, s.slot_positions, s.slot_mass, locked,
                                     s.num_computed);
  }
  const std::vector<float> scores = snapkv_scores(s.eviction, s.slot_mass, s.snapkv_end(), held);
  return kv::choose_evicted_tokens(s.eviction, s.slot_positions, scores, locked, s.snapkv_end());
}

std::vector<std::vector<int32_t>> EngineImpl::choose_head_slots(const Sequence& s) const {
  const int32_t held = s.table.num_tokens();
  const int32_t end = s.snapkv_end();
  if (s.num_computed != end || !s.evictions.empty() || held <= s.eviction.budget_tokens) {
    return {};
  }
  const kv::KvSpec& spec = runner_->kv_layout(0).spec();
  const auto num_heads = static_cast<size_t>(spec.num_layers) * spec.num_kv_heads;
  const auto stride = static_cast<size_t>(end);
  // No window (window_tokens 0) wanted no mass: every score is 0.
  STRATA_CHECK(s.head_mass.empty() || s.head_mass.size() == num_heads * stride,
               "SnapKV per head: the window's mass must cover every head and the prompt");
  const std::vector<float> none(s.head_mass.empty() ? stride : 0, 0.0f);
  std::vector<std::vector<float>> scores;
  scores.reserve(num_heads);
  for (size_t h = 0; h < num_heads; ++h) {
    const std::span<const float> mass =
        s.head_mass.empty() ? std::span<const float>(none)
                            : std::span<const float>(s.head_mass).subspan(h * stride, stride);
    scores.push_back(snapkv_scores(s.eviction, mass, end, held));
  }
  return kv::choose_evicted_tokens_per_head(s.eviction, s.slot_positions, scores, locked_slots(s),
                                            end);
}

Status EngineImpl::evict_tokens(RequestState& r, Sequence& s) {
  if (!s.eviction.active()) return Status::Ok();
  const int32_t bs = config_.block_size;
  if (s.num_evictions_applied < s.evictions.size()) {  // a recompute repeating them
    const engine::EvictionRecord& rec = s.evictions[s.num_evictions_applied];
    if (s.num_computed < rec.at_computed) return Status::Ok();
    STRATA_CHECK(s.num_computed == rec.at_computed, "a recompute ran past an eviction point");
    if (!rec.head_slots.empty()) {
      extend_slots(s);
      STRATA_RETURN_IF_ERROR(evict_head_slots(s, rec.head_slots));
    } else if (is_token_level(s.eviction.policy)) {
      extend_slots(s);
      STRATA_RETURN_IF_ERROR(evict_slots(s, rec.slots));
    } else {
      evict(s, rec.entries);
    }
    ++s.num_evictions_applied;
    return Status::Ok();
  }
  if (s.eviction.per_head()) {
    extend_slots(s);
    std::vector<std::vector<int32_t>> head_slots = choose_head_slots(s);
    if (!head_slots.empty()) {
      STRATA_RETURN_IF_ERROR(evict_head_slots(s, head_slots));
      const auto n = static_cast<int32_t>(head_slots.front().size());
      r.metrics.num_evicted_tokens += n;
      totals_.num_kv_evicted_tokens += n;
      s.evictions.push_back({s.num_computed, {}, {}, std::move(head_slots)});
      s.num_evictions_applied = s.evictions.size();
    }
    r.metrics.max_blocks_without_compaction =
        std::max(r.metrics.max_blocks_without_compaction, blocks_without_compaction(s, bs));
    return Status::Ok();
  }
  if (is_token_level(s.eviction.policy)) {
    extend_slots(s);
    std::vector<int32_t> slots = choose_slots(s);
    if (!slots.empty()) {
      STRATA_RETURN_IF_ERROR(evict_slots(s, slots));
      r.metrics.num_evicted_tokens += static_cast<int32_t>(slots.size());
      totals_.num_kv_evicted_tokens += static_cast<int64_t>(slots.size());
      s.evictions.push_back({s.num_computed, {}, std::move(slots)});
      s.num_evictions_applied = s.evictions.size();
    }
    r.metrics.max_blocks_without_compaction =
        std::max(r.metrics.max_blocks_without_compaction, blocks_without_compaction(s, bs));
    return Status::Ok();
  }
  // The policy runs at fixed points: while the prompt is computed, at multiples of the prefill
  // interval (the scheduler ends a prefill chunk at the first one past the budget), and from the
  // prompt's end on after every step (one token each). Between two points nothing goes, and any
  // chunking of the tokens between makes the same K/V, so where blocks go depends on the sequence
  // alone, never on the batch.
  const bool at_point =
      s.num_computed >= s.num_prompt || s.num_computed % s.eviction.prefill_interval(bs) == 0;
  if (at_point && s.table.num_tokens() > s.eviction.budget_tokens) {
    std::vector<float> scores;
    if (s.eviction.policy == KvEvictionPolicy::kPagedEviction) scores = block_scores(s);
    std::vector<int32_t> entries =
        kv::choose_evicted_blocks(s.eviction, s.table.num_tokens(), bs, scores);
    if (!entries.empty()) {
      evict(s, entries);
      r.metrics.num_evicted_blocks += static_cast<int32_t>(entries.size());
      totals_.num_kv_evicted_blocks += static_cast<int64_t>(entries.size());
      s.evictions.push_back({s.num_computed, std::move(entries), {}});
      s.num_evictions_applied = s.evictions.size();
    }
  }
  return Status::Ok();
}

}  // namespace strata

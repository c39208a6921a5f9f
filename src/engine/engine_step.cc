// One engine step: schedule, build the forward batch (token ids, positions, slot mapping, paged
// layout), run the copy-on-write copies and the forward pass, consume the logits (prompt
// logprobs, n > 1 forks, sampling, stop checks, prefix-cache registration), report the deltas.

#include <algorithm>
#include <chrono>

#include "engine/engine_impl.h"
#include "kv/block_copy.h"
#include "kv/kv_accounting.h"
#include "engine/step_batch.h"

namespace strata {

using engine::Sequence;

namespace {

struct Row {
  RequestState* request;
  Sequence* seq;
  int32_t first_pos;
  int32_t num_tokens;
  int32_t first_logits_row;  // -1: none
  int32_t sample_idx;        // -1: sampled on the host (if at all)
  int32_t late_mask = -1;    // a constrained row drawn on the device: its mask's index
  engine::StepBatch::MassRows mass = {};  // token-level eviction's attention mass rows
};

// Token-level eviction's attention mass (docs/kv-eviction.md): H2O's score is the mass of every
// query, SnapKV's that of the prompt's observation window (its last window_tokens positions),
// wanted only while its one eviction, at the prompt's end, is still to come and can take
// anything: per (layer, KV head) of the num_heads the cache holds, or their largest share.
void want_mass(Row& row, engine::StepBatch& batch, int32_t num_heads) {
  const Sequence& s = *row.seq;
  if (!is_token_level(s.eviction.policy)) return;
  int32_t first = 0;
  int32_t last = row.num_tokens;
  if (s.eviction.policy == KvEvictionPolicy::kSnapKv) {
    const int32_t end = s.snapkv_end();
    if (!s.evictions.empty() || end <= s.eviction.budget_tokens) return;
    first = std::max(0, end - s.eviction.window_tokens - s.num_computed);
    last = std::min(row.num_tokens, end - s.num_computed);
    if (first >= last) return;
  }
  model::MassMode mode = model::MassMode::kSum;  // H2O
  if (s.eviction.policy == KvEvictionPolicy::kSnapKv) {
    mode = s.eviction.per_head() ? model::MassMode::kPerHead : model::MassMode::kMax;
  }
  row.mass = batch.want_mass(first, last - first, mode, num_heads);
}

// Adds the row's mass to its sequence's, query by query in order: the sum a recompute makes
// again whatever its chunks.
void add_mass(const Row& row, std::span<const float> mass) {
  const engine::StepBatch::MassRows& rows = row.mass;
  if (rows.offset < 0) return;
  if (rows.row_size != rows.kv_len) {  // per (layer, KV head): head h's slots at h * snapkv_end
    Sequence& s = *row.seq;
    const int64_t num_heads = rows.row_size / rows.kv_len;
    const int64_t stride = s.snapkv_end();  // every window query precedes it: kv_len <= it
    s.head_mass.resize(static_cast<size_t>(num_heads * stride), 0.0f);
    for (int32_t q = 0; q < rows.count; ++q) {
      const float* m = mass.data() + rows.offset + q * rows.row_size;
      for (int64_t h = 0; h < num_heads; ++h) {
        float* acc = s.head_mass.data() + h * stride;
        for (int32_t j = 0; j < rows.kv_len; ++j) acc[j] += m[h * rows.kv_len + j];
      }
    }
    return;
  }
  std::vector<float>& acc = row.seq->slot_mass;
  acc.resize(static_cast<size_t>(rows.kv_len), 0.0f);
  for (int32_t q = 0; q < rows.count; ++q) {
    const float* m = mass.data() + rows.offset + static_cast<int64_t>(q) * rows.kv_len;
    for (int32_t j = 0; j < rows.kv_len; ++j) acc[static_cast<size_t>(j)] += m[j];
  }
}

// Whether the runner can draw seq's next token where the logits are: the n tokens complete the
// sequence, it wants no logits rows (prompt logprobs, all logits), no penalties (they read the
// token history on the host), at most the chosen token's logprob (none with a structured output,
// whose masked row has no raw logprob), and no n > 1 fork pending (the siblings sample the same
// row).
bool device_samplable(const RequestState& r, const Sequence& s, int32_t n) {
  return s.num_computed + n == static_cast<int32_t>(s.tokens.size()) && !s.wants_all_rows() &&
         !s.params.has_penalties() && s.params.logprobs <= (s.constraint ? -1 : 0) &&
         (r.request.n == 1 || r.forked);
}

model::DeviceSampleSpec device_spec(Sequence& s) {
  return {.temperature = s.params.temperature,
          .top_k = s.params.top_k,
          .top_p = s.params.top_p,
          .min_p = s.params.min_p,
          .seed = s.sampler->next_draw_seed(),
          .mask_later = s.constraint.has_value()};
}

}  // namespace

Result<std::vector<RequestOutput>> EngineImpl::step() {
  const double start = now();
  // The last step's compaction copies ran beside its end and the time since; from here on
  // blocks are allocated, swapped and read, so they must be done and their blocks back.
  STRATA_RETURN_IF_ERROR(finish_compactions());
  engine::SchedulerOutput plan = scheduler_->schedule(start);
  engine::StepBatch batch(*cache_);
  const kv::KvSpec& kv_spec = runner_->kv_layout(0).spec();
  const int32_t num_heads = kv_spec.num_layers * kv_spec.num_kv_heads;  // SnapKV per head
  std::vector<Row> rows;
  rows.reserve(plan.scheduled.size());
  // Structured outputs drawn on the device: their masks are made during the forward pass
  // (fill_masks, below), in the order of their rows.
  late_constraints_.clear();
  for (const engine::ScheduledSeq& sc : plan.scheduled) {
    Sequence& s = *sc.seq;
    RequestState& r = requests_.at(s.request_id);
    if (sc.first_admission && r.metrics.first_scheduled_time == 0.0) {
      r.metrics.first_scheduled_time = start;
      r.metrics.num_cached_tokens = sc.num_cached_tokens;
      r.metrics.num_host_tier_tokens = sc.num_host_tier_tokens;
      r.metrics.num_disk_tier_tokens = sc.num_disk_tier_tokens;
      totals_.num_prompt_tokens += s.num_prompt;
      totals_.num_cached_prompt_tokens += sc.num_cached_tokens;
      totals_.kv_host_tier_hit_tokens += sc.num_host_tier_tokens;
      totals_.kv_disk_tier_hit_tokens += sc.num_disk_tier_tokens;
    }
    if (runner_->samples_on_device() && device_samplable(r, s, sc.num_tokens)) {
      rows.push_back(Row{&r, &s, s.num_computed, sc.num_tokens, -1,
                         batch.add_sampled(s, sc.num_tokens, device_spec(s))});
      if (s.constraint) {
        rows.back().late_mask = static_cast<int32_t>(late_constraints_.size());
        late_constraints_.push_back(&*s.constraint);
      }
    } else {
      rows.push_back(Row{&r, &s, s.num_computed, sc.num_tokens, batch.add(s, sc.num_tokens), -1});
      want_mass(rows.back(), batch, num_heads);
    }
  }
  const double scheduled = now();
  double forward_seconds = 0.0;
  // Swap-outs read blocks that may already belong to another sequence: done before any write.
  for (const kv::SwapSpace::Transfer& t : plan.swap_outs) t.wait();
  if (!batch.empty()) {
    const double forward_start = now();
    // Copy-on-write, before any KV write, in every group (a fork's partly filled block).
    for (int32_t g = 0; g < cache_->num_groups(); ++g) {
      STRATA_RETURN_IF_ERROR(runner_->copy_blocks(g, cache_->take_pending_copies(g)));
    }
    const auto vocab = static_cast<size_t>(vocab_size());
    logits_.resize(batch.num_logits_rows() * vocab);
    sampled_.resize(batch.num_sample_rows());
    model::ForwardBatch view = batch.view();
    late_next_.assign(late_constraints_.size(), engine::OutputConstraint::Next::kSample);
    if (!late_constraints_.empty()) view.fill_masks = [this](std::span<uint64_t* const> masks) {
      fill_late_masks(masks);
    };
    mass_.resize(static_cast<size_t>(batch.mass_size()));
    if (!mass_.empty()) view.attention_mass = mass_;
    STRATA_RETURN_IF_ERROR(runner_->forward(view, logits_, sampled_));
    forward_seconds = now() - forward_start;
    for (const Row& row : rows) {
      add_mass(row, mass_);
      const float* logits = row.first_logits_row < 0
                                ? nullptr
                                : logits_.data() + static_cast<size_t>(row.first_logits_row) * vocab;
      // A constrained row whose output was complete or at a dead end drew under no mask of its
      // own: its token is dropped, and sample_next ends it as its grammar says.
      const bool drop = row.late_mask >= 0 && late_next_[static_cast<size_t>(row.late_mask)] !=
                                                  engine::OutputConstraint::Next::kSample;
      const model::SampledToken* sampled =
          row.sample_idx < 0 || drop ? nullptr : &sampled_[static_cast<size_t>(row.sample_idx)];
      STRATA_RETURN_IF_ERROR(
          consume(*row.request, *row.seq, row.first_pos, row.num_tokens, logits, sampled));
    }
    // The compactions the step's evictions planned copy beside the rest of the step and the
    // time until the next one.
    start_compactions();
  }
  // A prefill instance's new blocks go down to its host tier, and so to its outbox, before the
  // requests that computed them are answered: the decode instance reads them as soon as its
  // prefill call returns, rather than a step later.
  if (config_.kv_role == KvRole::kPrefill && tiers_ != nullptr &&
      tiers_->has_write_through_pending()) {
    tiers_->poll();
  }
  std::vector<RequestOutput> outputs;
  std::vector<RequestId> done;
  for (auto& [id, r] : requests_) {
    RequestOutput out = collect(r);
    if (!out.deltas.empty() || out.finished) outputs.push_back(std::move(out));
    if (r.reported_done) done.push_back(id);
  }
  for (const RequestId id : done) requests_.erase(id);
  record_step_stats(plan, start, scheduled, forward_seconds);
  return outputs;
}

void EngineImpl::fill_late_masks(std::span<uint64_t* const> masks) {
  const size_t words = (static_cast<size_t>(vocab_size()) + 63) / 64;
  for (size_t i = 0; i < masks.size() && i < late_constraints_.size(); ++i) {
    const std::span<uint64_t> mask(masks[i], words);
    late_next_[i] = late_constraints_[i]->allowed(mask);
    // Nothing to draw: any token will do, it is dropped.
    if (late_next_[i] != engine::OutputConstraint::Next::kSample) {
      std::fill(mask.begin(), mask.end(), ~uint64_t{0});
    }
  }
}

Status EngineImpl::consume(RequestState& r, Sequence& s, int32_t first_pos, int32_t num_rows,
                           const float* logits, const model::SampledToken* sampled) {
  const auto vocab = static_cast<size_t>(vocab_size());
  const bool all_rows = s.wants_all_rows();
  if (all_rows && s.params.prompt_logprobs >= 0) {
    for (int32_t j = 0; j < num_rows; ++j) {  // the logits at position p score prompt token p + 1
      const int32_t next = first_pos + j + 1;
      if (next >= s.num_prompt) break;
      r.prompt_logprobs[static_cast<size_t>(next)] = engine::compute_logprobs(
          {logits + j * vocab, vocab}, s.tokens[static_cast<size_t>(next)], s.params.prompt_logprobs);
    }
  }
  if (all_rows && s.all_logits) {  // rows past the prompt (none but a decode's) are not kept
    const int32_t kept = std::min(num_rows, s.num_prompt - first_pos);
    std::copy(logits, logits + static_cast<size_t>(kept) * vocab,
              r.prompt_logits.begin() + static_cast<ptrdiff_t>(first_pos) * vocab);
  }
  s.num_computed += num_rows;
  // A token-level policy compacts its blocks in place: they never enter the prefix cache.
  if (!is_token_level(s.eviction.policy)) {
    cache_->cache_full_blocks(s.table, s.tokens, s.num_computed, s.cache_keys);
  }
  // Blocks no later query reads (a window's past, an INT4 cache's older full-precision blocks)
  // go back now, before a fork shares them.
  cache_->free_unneeded_blocks(s.table, s.num_computed);
  // Token eviction, before a fork shares the table (the siblings start from what stays).
  STRATA_RETURN_IF_ERROR(evict_tokens(r, s));
  r.metrics.max_held_blocks =
      std::max(r.metrics.max_held_blocks,
               static_cast<int32_t>(s.table.blocks().size()) - s.table.num_skipped_blocks());
  if (s.num_computed < static_cast<int32_t>(s.tokens.size())) return Status::Ok();
  if (s.num_computed >= s.num_prompt) s.prompt_logprobs_done = true;
  const float* last = logits == nullptr ? nullptr : logits + (all_rows ? (num_rows - 1) * vocab : 0);
  // n > 1: the prompt is done once; its siblings fork here and sample from the same logits row,
  // each with its own sampler (seed + index).
  std::vector<Sequence*> to_sample{&s};
  if (r.request.n > 1 && !r.forked) {
    fork_siblings(r, s);
    for (size_t i = 1; i < r.seqs.size(); ++i) to_sample.push_back(r.seqs[i].get());
  }
  for (Sequence* t : to_sample) STRATA_RETURN_IF_ERROR(sample_next(r, *t, last, sampled));
  return Status::Ok();
}

Status EngineImpl::sample_next(RequestState& r, Sequence& s, const float* logits,
                               const model::SampledToken* sampled) {
  std::span<const uint64_t> allowed;
  // On the device the row was drawn under the mask the step was built with.
  if (s.constraint && sampled == nullptr) {
    switch (s.constraint->allowed(allowed_)) {
      case engine::OutputConstraint::Next::kSample:
        allowed = allowed_;
        break;
      case engine::OutputConstraint::Next::kComplete:
        finish_sequence(s, FinishReason::kStop);
        return Status::Ok();
      case engine::OutputConstraint::Next::kDeadEnd:  // it can never be completed
        finish_sequence(s, FinishReason::kLength);
        return Status::Ok();
    }
  }
  const auto vocab = static_cast<size_t>(vocab_size());
  Result<engine::SampleResult> drawn =
      sampled != nullptr
          ? Result<engine::SampleResult>(engine::SampleResult{sampled->token, sampled->logprob, {}})
          : s.sampler->sample({logits, vocab}, s.counts, allowed);
  if (!drawn.ok()) return drawn.status();
  const int32_t token = drawn->token;
  s.tokens.push_back(token);
  s.counts.add_output(token);
  s.result.output_ids.push_back(token);
  ++totals_.num_generated_tokens;
  if (r.metrics.first_token_time == 0.0) r.metrics.first_token_time = now();
  if (s.params.logprobs >= 0) {
    s.result.output_logprobs.push_back(
        TokenLogprobs{token, drawn->logprob, std::move(drawn->top_logprobs)});
  }
  // A constrained output ends at an end token (offered only where it is complete), whatever
  // ignore_eos says: past it the grammar has nothing to follow.
  const bool stop = s.constraint ? s.constraint->ends(token)
                                 : engine::is_stop_token(token, s.params, config_.eos_token_ids);
  if (s.constraint && !stop) s.constraint->advance(token);
  if (stop) {
    finish_sequence(s, FinishReason::kStop);
  } else if (static_cast<int32_t>(s.result.output_ids.size()) >= s.params.max_tokens) {
    finish_sequence(s, FinishReason::kLength);
  }
  return Status::Ok();
}

void EngineImpl::fork_siblings(RequestState& r, Sequence& parent) {
  r.forked = true;
  for (int32_t i = 1; i < r.request.n; ++i) {
    Sequence& child = new_sequence(r, i);
    child.tokens = parent.tokens;
    child.num_prompt = parent.num_prompt;
    child.num_computed = parent.num_computed;
    child.cache_keys = parent.cache_keys;
    child.counts = parent.counts;
    child.evictions = parent.evictions;
    child.num_evictions_applied = parent.num_evictions_applied;
    child.block_scores = parent.block_scores;
    child.slot_positions = parent.slot_positions;
    child.slot_mass = parent.slot_mass;
    child.head_mass = parent.head_mass;
    child.head_positions = parent.head_positions;
    child.prefix_looked_up = true;
    child.prompt_logprobs_done = true;
    cache_->fork(parent.table, child.table);
    scheduler_->add_forked(&child, &parent);
  }
}

void EngineImpl::finish_sequence(Sequence& s, FinishReason reason) {
  s.result.finish_reason = reason;
  s.finished = true;
  scheduler_->finish(&s);
}

RequestOutput EngineImpl::collect(RequestState& r) {
  constexpr auto kReported = static_cast<size_t>(-1);  // num_sent once the finish was sent
  RequestOutput out;
  out.id = r.id;
  for (auto& seq : r.seqs) {
    Sequence& s = *seq;
    if (r.cancelled || s.num_sent == kReported) continue;
    if (s.num_sent == s.result.output_ids.size() && !s.finished) continue;
    CompletionDelta d;
    d.index = s.index;
    const auto from = static_cast<ptrdiff_t>(s.num_sent);
    d.token_ids.assign(s.result.output_ids.begin() + from, s.result.output_ids.end());
    if (s.params.logprobs >= 0) {
      d.logprobs.assign(s.result.output_logprobs.begin() + from, s.result.output_logprobs.end());
    }
    if (s.finished) d.finish_reason = s.result.finish_reason;
    s.num_sent = s.finished ? kReported : s.result.output_ids.size();
    out.deltas.push_back(std::move(d));
  }
  if (!r.prompt_outputs_sent && !out.deltas.empty()) {
    if (r.request.params.prompt_logprobs >= 0) out.prompt_logprobs = r.prompt_logprobs;
    out.prompt_logits = std::move(r.prompt_logits);
    r.prompt_outputs_sent = true;
  }
  if (!r.reported_done && (r.cancelled || r.all_finished())) {
    r.reported_done = true;
    out.finished = true;
    out.cancelled = r.cancelled;
    r.metrics.finished_time = now();
  }
  for (const auto& seq : r.seqs) {
    r.metrics.num_preemptions = std::max(r.metrics.num_preemptions, seq->num_preemptions);
  }
  out.metrics = r.metrics;
  return out;
}

void EngineImpl::record_step_stats(const engine::SchedulerOutput& plan, double start,
                                   double scheduled, double forward_seconds) {
  EngineStepStats& st = last_step_;
  st.num_running = scheduler_->num_running();
  st.num_waiting = scheduler_->num_waiting();
  st.num_swapped = scheduler_->num_swapped();
  st.num_scheduled_seqs = static_cast<int32_t>(plan.scheduled.size());
  st.num_prefill_tokens = plan.num_prefill_tokens;
  st.num_decode_tokens = plan.num_decode_tokens;
  st.num_preempted = static_cast<int32_t>(plan.preempted.size());
  st.schedule_seconds = scheduled - start;
  st.forward_seconds = forward_seconds;
  st.step_seconds = now() - start;
  const kv::BlockPool& pool = cache_->pool();
  // A compaction's given-up blocks go back when its copies are done, before the next step
  // schedules: free from that step's view, so counted free here.
  st.num_used_blocks = pool.num_used_blocks() - num_compacting_blocks();
  st.num_free_blocks = pool.num_free_blocks() + num_compacting_blocks();
  st.num_cached_blocks = pool.num_cached_blocks();
  std::vector<const kv::BlockTable*> tables;
  for (const Sequence* s : scheduler_->running()) tables.push_back(&s->table);
  for (const kv::BlockTable& t : scheduler_->held_by_batch()) tables.push_back(&t);
  const kv::PoolUsage usage = kv::measure_usage(pool, tables);
  st.live_token_slots = usage.live_slots;
  st.capacity_token_slots = usage.capacity_slots;
  ++totals_.num_steps;
  totals_.num_preemptions += st.num_preempted;
  totals_.num_swapped_out_blocks += plan.num_swapped_out_blocks;
  totals_.num_swapped_in_blocks += plan.num_swapped_in_blocks;
  const kv::PrefixCacheStats cache = cache_->stats();
  totals_.prefix_query_tokens = cache.num_query_tokens;
  totals_.prefix_hit_tokens = cache.num_hit_tokens;
  totals_.num_evictions = cache.num_evictions;
  if (kv_events_ != nullptr) {
    if (tiers_ != nullptr) tiers_->publish_events();  // the disk and remote writes done by now
    kv_events_->end_step();  // this step's events, one batch
    const kv::KvEventPublisherStats e = kv_events_->stats();
    totals_.kv_events_published_blocks = e.queued_blocks;
    totals_.kv_events_dropped_blocks = e.dropped_blocks;
  }
  if (tiers_ != nullptr) {
    // What computing a prefix costs here, against which reading it from Redis is weighed.
    if (plan.num_prefill_tokens > 0) {
      tiers_->observe_step(plan.num_prefill_tokens + plan.num_decode_tokens, forward_seconds);
    }
    const kv::KvTierStats& t = tiers_->stats();
    totals_.kv_offloaded_blocks = t.num_offloaded_blocks;
    totals_.kv_disk_written_blocks = t.num_disk_writes;
    totals_.kv_tier_faults = t.num_faults;
    totals_.kv_remote_fetched_blocks = t.num_remote_fetched_blocks;
    totals_.kv_remote_hit_tokens = t.num_remote_hit_blocks * config_.block_size;
    totals_.kv_remote_skipped_blocks = t.num_remote_skipped_blocks;
    totals_.kv_remote_overdue_requests = t.num_remote_overdue;
    if (const kv::RemoteTier* remote = tiers_->remote()) {
      const kv::RemoteTierStats r = remote->stats();
      totals_.kv_remote_written_blocks = r.num_writes;
      totals_.kv_remote_present_blocks = r.num_present;
      totals_.kv_remote_dropped_writes = r.num_dropped + r.num_put_errors;
      totals_.kv_remote_errors = r.num_get_errors;
      totals_.kv_remote_read_bytes = r.bytes_read;
      totals_.kv_remote_written_bytes = r.bytes_written;
      totals_.kv_remote_get_latency = r.get_latency;
      totals_.kv_remote_put_latency = r.put_latency;
    }
    if (const std::optional<kv::PeerSourceStats> peer = tiers_->peer_stats()) {
      const kv::PeerSourceStats& p = *peer;
      totals_.kv_peer_read_blocks = p.num_hits;
      totals_.kv_peer_read_bytes = p.bytes_read;
      totals_.kv_peer_faults = p.num_bad + p.num_missing;
      totals_.kv_peer_errors = p.num_errors;
      totals_.kv_peer_get_latency = p.get_latency;
      totals_.kv_peer_transfer_seconds = p.transfer_seconds;
      totals_.kv_peer_region_read_blocks = p.num_slot_hits;
      totals_.kv_peer_region_reused = p.num_slot_reused;
      totals_.kv_peer_region_pool_blocks = p.num_slot_pool_blocks;
    }
    if (const kv::PeerOutbox* outbox = tiers_->outbox()) {
      const kv::PeerOutboxStats o = outbox->stats();
      totals_.kv_peer_served_blocks = o.num_served;
      totals_.kv_peer_served_bytes = o.bytes_served;
      totals_.kv_peer_dropped_blocks = o.num_dropped;
      if (const kv::PeerSlots* slots = tiers_->peer_slots()) {
        const kv::PeerSlotsStats r = slots->stats();  // records served: blocks copied out
        totals_.kv_peer_served_blocks += r.num_served;
        totals_.kv_peer_served_bytes += r.bytes_served;
      }
    }
    totals_.kv_prefetched_blocks = t.num_prefetched_blocks;
    totals_.kv_dropped_blocks = t.num_dropped_blocks;
    totals_.kv_disk_read_seconds = t.disk_read_seconds;
    totals_.kv_io_wait_seconds = t.io_wait_seconds;
    totals_.kv_tier_down_seconds = t.down_seconds;
    totals_.kv_tier_up_seconds = t.up_seconds;
  }
}

std::vector<kv::SwapSpace*> EngineImpl::swap_spaces() const {
  std::vector<kv::SwapSpace*> spaces;
  spaces.reserve(swaps_.size());
  for (const auto& s : swaps_) spaces.push_back(s.get());
  return spaces;
}

}  // namespace strata

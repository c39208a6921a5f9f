#pragma once
// EngineImpl: what strata::Engine (include/strata/engine.h) holds -- the model runner (the
// backend with its KV pool: model/model_runner.h), the pool's manager, the scheduler, and every
// live request with its sequences. engine.cc: creation, submit, cancel; engine_step.cc: one step.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/compaction_copier.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "grammar/grammar_compiler.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_event_publisher.h"
#include "kv/kv_tiers.h"
#include "kv/swap_space.h"
#include "model/model.h"
#include "model/model_runner.h"
#include "strata/engine.h"
#include "tokenizer/tokenizer.h"

namespace strata {

// One submitted request: its n sequences (one until the prompt is done, then forked) and what
// it has reported.
struct RequestState {
  RequestId id = 0;
  EngineRequest request;
  std::vector<std::unique_ptr<engine::Sequence>> seqs;
  RequestMetrics metrics;
  ResolvedKvEviction eviction;  // every sequence's (request's fields over the engine's)
  bool forked = false;       // the n - 1 siblings exist
  bool cancelled = false;
  bool reported_done = false;
  bool prompt_outputs_sent = false;  // prompt_logprobs and prompt_logits (with the first delta)
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  std::vector<float> prompt_logits;  // request.prompt_logits: [num_prompt, vocab]
  // params.structured, compiled; every sequence of the request starts in its start state.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  bool all_finished() const;
};

class EngineImpl {
 public:
  // The runner's pools, one per KV cache group (groups[g]: its kind and window or R; the pool's
  // KvSpec is taken from the runner); owned_pool (may be null) is what the runner borrows.
  EngineImpl(std::unique_ptr<ThreadPool> owned_pool, std::unique_ptr<model::ModelRunner> runner,
             std::vector<kv::KvGroupSpec> groups, EngineConfig config);

  static Status validate_config(const EngineConfig& config);
  // The KV tiers of config.kv_offload_bytes (none when 0), attached to the pool and the scheduler.
  Status start_tiers();
  // The KV events publisher of config.kv_events_endpoint (none when empty), the pool's sink.
  Status start_kv_events();
  // Whether this engine can run EngineConfig::kv_eviction (its device and KV cache).
  Status check_default_eviction() const;
  // EngineConfig::warm_up's request (where it applies), run to its end before the tiers and KV
  // events start; the engine then holds no request, no cached block and no counts.
  Status warm_up();

  Result<RequestId> submit(EngineRequest request);
  // Engine::compile_structured_output: thread-safe.
  Result<std::shared_ptr<const grammar::CompiledGrammar>> compile_structured_output(
      const StructuredOutput& constraint) const;
  void cancel(RequestId id);
  Status reset_prefix_cache();
  Result<std::vector<RequestOutput>> step();

  // Requests unfinished, or blocks cached since the last step that the KV tiers write through to
  // host memory at the next one: an idle loop steps once more, so that copy is done between
  // requests rather than at the start of the next one.
  bool has_unfinished() const {
    return !requests_.empty() || (tiers_ != nullptr && tiers_->has_write_through_pending());
  }
  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
  }
  std::string peer_address() const { return peer_server_ ? peer_server_->address() : ""; }

  EngineConfig config_;
  EngineStepStats last_step_;
  EngineTotals totals_;
  std::unique_ptr<ThreadPool> owned_pool_;         // destroyed after the runner that uses it
  std::unique_ptr<model::ModelRunner> runner_;
  ModelInfo model_info_;
  KvCacheInfo kv_cache_info_;
  WarmUpInfo warm_up_info_;

  const kv::KvCacheManager& cache() const { return *cache_; }
  // Blocks the compactions in flight still hold (given back at the next step's start).
  int32_t num_compacting_blocks() const;
  int32_t vocab_size() const { return static_cast<int32_t>(runner_->config().vocab_size); }
  // The largest prompt + max_tokens validate_request accepts.
  int64_t max_request_tokens() const;

 private:
  // eviction: the request's, resolved (a sequence under a budget needs fewer blocks).
  Status validate_request(const EngineRequest& request, const ResolvedKvEviction& eviction) const;
  // Whether a request of `total` tokens (prompt + max_tokens) can ever hold its KV blocks.
  bool fits_pool(int64_t total) const;
  engine::Sequence& new_sequence(RequestState& r, int32_t index);
  // ForwardBatch::fill_masks of a step: masks[i] = late_constraints_[i]'s mask.
  void fill_late_masks(std::span<uint64_t* const> masks);
  // After a step computed num_rows tokens of seq: prompt logprobs, fork, sampling (or the token
  // the runner drew, when sampled is set), stop checks.
  Status consume(RequestState& r, engine::Sequence& seq, int32_t first_pos, int32_t num_rows,
                 const float* logits, const model::SampledToken* sampled);
  // Draws seq's next token from logits (the runner's, when sampled is set) and applies the stop
  // rules; a constrained sequence draws under its mask, or ends where its grammar says so.
  Status sample_next(RequestState& r, engine::Sequence& seq, const float* logits,
                     const model::SampledToken* sampled);
  void fork_siblings(RequestState& r, engine::Sequence& parent);
  // Token eviction after a step (engine_eviction.cc, docs/kv-eviction.md): a recompute repeats
  // the eviction recorded at this point; otherwise, at a multiple of the prefill interval in the
  // prompt, its end, or after a decode step, the policy takes blocks while the table holds more
  // than the budget.
  Status evict_tokens(RequestState& r, engine::Sequence& seq);
  // Why the engine cannot run a request with this eviction, or OK.
  Status check_eviction(const ResolvedKvEviction& eviction) const;
  // EngineConfig::kv_eviction_prefill_interval_tokens, or its automatic value: a block on the
  // CPU, 512 tokens (a multiple of every block size) on the GPU.
  int32_t eviction_prefill_interval() const;
  // PagedEviction's score of each entry of seq's row: seq's cached scores of its full blocks,
  // those filled since computed now (copied out of the pool), 0 for a partly filled newest block.
  std::vector<float> block_scores(engine::Sequence& seq);
  // Takes the row entries out of seq's table and their scores out of seq's cached scores.
  void evict(engine::Sequence& seq, std::span<const int32_t> entries);
  // Token-level eviction: takes the slots out and compacts (KvCacheManager::compact_tokens), the
  // slots' positions and mass with them.
  Status evict_slots(engine::Sequence& seq, std::span<const int32_t> slots);
  // Token-level eviction at a point: the slots the policy takes now (none when within budget or
  // not at a point). seq's slot positions and mass cover its table.
  std::vector<int32_t> choose_slots(const engine::Sequence& seq) const;
  // SnapKV per (layer, KV head): the same per head (KvCacheManager::compact_head_tokens), each
  // head's slot positions moved with its slots.
  Status evict_head_slots(engine::Sequence& seq, std::span<const std::vector<int32_t>> head_slots);
  // SnapKV per (layer, KV head) at the prompt's end: each head's slots to take (empty when within
  // budget or not at the point). seq's head mass covers its prompt.
  std::vector<std::vector<int32_t>> choose_head_slots(const engine::Sequence& seq) const;
  // Runs seq's compaction plan: its copies on the copier's thread (released after them, by
  // finish_compactions), or here and now with the blocks released at once.
  Status run_compaction(kv::CompactionPlan plan);
  // Hands the step's compaction copies to the copier (after its sequences are consumed).
  void start_compactions();
  // Waits for the copier and gives the compacted blocks back: before a step schedules (blocks
  // are allocated, swapped and read from there on), and when the engine must be idle.
  Status finish_compactions();
  // Slots of seq's table in a block another table holds too (a fork's): never written.
  std::vector<uint8_t> locked_slots(const engine::Sequence& seq) const;
  void finish_sequence(engine::Sequence& seq, FinishReason reason);
  RequestOutput collect(RequestState& r);
  std::vector<kv::SwapSpace*> swap_spaces() const;
  void record_step_stats(const engine::SchedulerOutput& out, double start, double scheduled,
                         double forward_seconds);

  std::optional<tokenizer::Tokenizer> tokenizer_;  // model_dir's tokenizer.json, when present
  // Structured outputs' grammars over tokenizer_'s vocabulary (null without a tokenizer).
  std::unique_ptr<grammar::GrammarCompiler> grammars_;
  std::vector<uint64_t> allowed_;  // one constrained sequence's mask, per host sampling
  // The step's constrained rows drawn on the device, in sample-row order: their constraints,
  // whose masks fill_late_masks makes during the forward pass (on the runner's mask thread, while
  // the step thread waits in forward()), and what each said.
  std::vector<engine::OutputConstraint*> late_constraints_;
  std::vector<engine::OutputConstraint::Next> late_next_;
  int32_t window_ = 0;
  // --kv-events-endpoint: group 0's pool reports to it; destroyed after cache_.
  std::unique_ptr<kv::KvEventPublisher> kv_events_;
  std::unique_ptr<kv::KvCacheManager> cache_;
  // Swap preemption only, one per KV cache group; destroyed before runner_.
  std::vector<std::unique_ptr<kv::SwapSpace>> swaps_;
  std::vector<std::unique_ptr<kv::BlockMover>> tier_movers_;  // one per group, for tiers_
  std::unique_ptr<kv::KvTiers> tiers_;  // --kv-offload-bytes; borrows cache_ and the movers
  // --role prefill: serves tiers_'s outbox to decode instances (stops before tiers_ goes).
  std::unique_ptr<kv::PeerServer> peer_server_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  std::map<RequestId, RequestState> requests_;
  RequestId next_id_ = 1;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  std::vector<float> logits_;
  // Token-level eviction's attention mass of a step (StepBatch::want_mass).
  std::vector<float> mass_;
  std::vector<model::SampledToken> sampled_;
  // PagedEviction reads the blocks it scores through a mover of its own (swap's copy thread
  // keeps the runner's) into a host buffer that grows as needed.
  std::unique_ptr<kv::BlockMover> score_mover_;
  std::unique_ptr<kv::HostKvBuffer> score_buffer_;
  // Token-level eviction's compactions planned since the last step began
  // (config_.kv_compaction_copy_thread): their blocks go back once the copier has run their
  // copies, before the next step schedules (finish_compactions). The copier starts with the
  // first, and is declared last so that it stops (its thread calls runner_) before the rest go.
  std::vector<kv::CompactionPlan> compacting_;
  std::vector<kv::SlotCopy> step_copies_;  // the plans' copies not yet handed to the copier
  std::unique_ptr<engine::CompactionCopier> copier_;
};

}  // namespace strata

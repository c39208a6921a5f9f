#pragma once
// Sequence: one stream of tokens through the engine -- its prompt and output ids, how many of them
// have K/V in the cache, its block table, its sampler and history, and what it returns.
// Owned by the step loop; not thread-safe.

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/output_constraint.h"
#include "engine/sampler.h"
#include "kv/block_hash.h"
#include "kv/block_table.h"
#include "kv/swap_space.h"
#include "kv/kv_tiers.h"
#include "strata/kv_eviction.h"
#include "strata/sampling_params.h"
#include "strata/token_output.h"

namespace strata::engine {

// Block sizes the engine accepts (EngineConfig::block_size, --block-size); tests sweep the
// same array.
inline constexpr std::array<int32_t, 5> kSupportedBlockSizes = {8, 16, 32, 64, 128};

struct GenerationResult {
  std::vector<int32_t> output_ids;  // generated tokens, the stop token included
  // One per output token when params.logprobs >= 0.
  std::vector<TokenLogprobs> output_logprobs;
  // One per prompt token when params.prompt_logprobs >= 0; the first is nullopt (OpenAI echo).
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  FinishReason finish_reason = FinishReason::kLength;
};

// Where a sequence is in the continuous scheduler.
// kSwapped: preempted by swap, its K/V in the swap space; kSwappingIn: its blocks are coming
// back (a copy in flight), not scheduled until they are there.
enum class SeqStatus { kWaiting, kRunning, kSwapped, kSwappingIn, kFinished };

// One token eviction of a sequence (docs/kv-eviction.md): after the step that brought
// num_computed to at_computed, the block table's entries `entries` went (block-wise policies),
// or its slots `slots` (token-level policies, compacted as KvCacheManager::compact_tokens
// says). Kept so that a recompute after preemption makes the same K/V again: its chunks stop at
// each at_computed and the same entries or slots go there.
// SnapKV per (layer, KV head) records head_slots instead: the slots each head (layer *
// num_kv_heads + kv_head) gave up, as KvCacheManager::compact_head_tokens took them.
struct EvictionRecord {
  int32_t at_computed = 0;
  std::vector<int32_t> entries;
  std::vector<int32_t> slots;
  std::vector<std::vector<int32_t>> head_slots = {};
};
struct Sequence {
  std::vector<int32_t> tokens;  // prompt, then output
  int32_t num_prompt = 0;
  int32_t num_computed = 0;     // tokens whose K/V are in the cache
  kv::BlockTable table;
  kv::BlockExtraKeys cache_keys;  // what else keys its blocks in the prefix cache (the salt)
  bool prefix_looked_up = false;  // the prefix cache was asked once, at its first schedule
  // Prompt tokens the KV tiers brought back into the pool for it while it waited.
  int32_t num_host_tier_tokens = 0;
  int32_t num_disk_tier_tokens = 0;
  // Its prefix's blocks the KV tiers are loading from disk while it waits; it is not admitted
  // while reads are pending.
  kv::PrefetchState prefetch;
  SamplingParams params;
  std::optional<Sampler> sampler;
  TokenCounts counts;
  // params.structured's place in its grammar; sampled on the host, masked.
  std::optional<OutputConstraint> constraint;
  // Scoring: every prompt position's logits are wanted (returned once in
  // RequestOutput::prompt_logits; the sequence samples as usual).
  bool all_logits = false;
  bool finished = false;
  GenerationResult result;

  // ---- continuous scheduling ----
  uint64_t request_id = 0;
  int32_t index = 0;            // which of its request's n sequences
  SeqStatus status = SeqStatus::kWaiting;
  int32_t priority = 0;         // lower runs first (priority policy)
  uint64_t arrival_order = 0;   // the request's submission order
  size_t num_sent = 0;          // output tokens already returned in step outputs
  // The prompt's rows (prompt logprobs, all_logits) are computed once; a recompute after
  // preemption skips them.
  bool prompt_logprobs_done = false;
  int32_t num_preemptions = 0;
  // Token eviction: the policy, every eviction so far, and how many of them the table has (all,
  // but while a recompute after preemption repeats them).
  ResolvedKvEviction eviction;
  std::vector<EvictionRecord> evictions;
  size_t num_evictions_applied = 0;
  // PagedEviction: the score of each full block of the table's row, in row order (a prefix of
  // the row); a full block's K/V never change. Emptied with the table on a recompute.
  std::vector<float> block_scores;
  // Token-level policies (H2O, SnapKV), one per slot of the table's row, moved with the slots by
  // compaction: the position each holds, and the attention mass the queries so far gave it (H2O:
  // every query; SnapKV: the prompt's observation window). Grown as slots appear; emptied with
  // the table on a recompute, which computes the same mass again query by query.
  std::vector<int32_t> slot_positions;
  std::vector<float> slot_mass;
  // SnapKV per (layer, KV head) (ResolvedKvEviction::per_head), head i = layer * num_kv_heads +
  // kv_head: the observation window's mass per head, [heads][num_prompt] (slot j of head i at
  // i * num_prompt + j), until its eviction; from it on, each head's slot positions (a slot holds
  // a different position in different heads), which then replace slot_positions. Emptied with
  // the table on a recompute.
  std::vector<float> head_mass;
  std::vector<std::vector<int32_t>> head_positions;
  double arrival_time = 0.0;           // engine clock, seconds
  int64_t contiguous_offset = -1;      // contiguous-allocator baseline: reserved range, or -1
  // Swap preemption, one per KV cache group while swapped or swapping in (else empty): the row's
  // entries (kNullBlock where no later query reads one), the swap blocks holding the rest in
  // order and the copy in flight, and the pool blocks a swap-in copies them into.
  struct SwappedRow {
    std::vector<BlockId> layout;
    std::optional<kv::SwapSpace::Transfer> transfer;
    std::vector<BlockId> swap_in_blocks;
  };
  std::vector<SwappedRow> swapped;

  Sequence(int32_t block_size, int32_t vocab) : table(block_size), counts(vocab) {}
  bool wants_all_rows() const {
    return (all_logits || params.prompt_logprobs >= 0) && !prompt_logprobs_done;
  }
  // SnapKV: the prompt positions its one selection follows (their last window_tokens are the
  // observation window); the prompt's end unless selection_at_tokens puts it earlier, the
  // prompt's later tokens being teacher-forced through the evicted cache like generated ones.
  int32_t snapkv_end() const {
    const int32_t at = eviction.selection_at_tokens;
    return at > 0 ? std::min(at, num_prompt) : num_prompt;
  }
  // While a recompute repeats its evictions: the num_computed the next chunk must stop at (the
  // next eviction's); else the whole sequence.
  int32_t next_eviction_stop() const {
    return num_evictions_applied < evictions.size() ? evictions[num_evictions_applied].at_computed
                                                    : static_cast<int32_t>(tokens.size());
  }
  // Token eviction evaluates its policy while the prompt is computed only at multiples of its
  // prefill interval (block boundaries unless the engine spaces them wider) and at the prompt's
  // end, so that the points where blocks go depend on the sequence alone: a prefill chunk from
  // position `from`, with held_slots in the table, must end at or before the first point at
  // which the table would hold more than the budget. The most tokens it may compute (a large
  // number when eviction is off or the prompt is done).
  int32_t eviction_chunk_limit(int32_t from, int32_t block_size, int32_t held_slots) const {
    // SnapKV evicts nothing before its selection point: a chunk ends there (when it is before
    // the prompt's end) and runs on freely after it.
    if (eviction.active() && eviction.policy == KvEvictionPolicy::kSnapKv) {
      return evictions.empty() && from < snapkv_end() && snapkv_end() < num_prompt
                 ? snapkv_end() - from
                 : INT32_MAX;
    }
    if (!eviction.active() || from >= num_prompt) return INT32_MAX;
    const int64_t interval = eviction.prefill_interval(block_size);
    const int32_t room = std::max(eviction.budget_tokens - held_slots, 0);
    const int64_t boundary = (static_cast<int64_t>(from) + room) / interval * interval + interval;
    return static_cast<int32_t>(std::min<int64_t>(boundary - from, INT32_MAX));
  }
  // Positions the applied evictions took out of the table.
  int32_t num_evicted_tokens(int32_t block_size) const {
    int32_t n = 0;
    for (size_t i = 0; i < num_evictions_applied; ++i) {
      n += static_cast<int32_t>(evictions[i].entries.size()) * block_size +
           static_cast<int32_t>(evictions[i].slots.size());
      if (!evictions[i].head_slots.empty()) {
        n += static_cast<int32_t>(evictions[i].head_slots.front().size());
      }
    }
    return n;
  }
  // How many leading tokens a prefix-cache lookup may cover (it never returns the block holding
  // the last one): the tokens before the first eviction point. Cached blocks hold what a run
  // without eviction computes; a run under a budget evicts at the first eviction point past it
  // (or did at its first recorded eviction), and what it computes from there on attended to
  // fewer tokens -- so the hit ends before that point, and the first chunk runs to it.
  // A token-level policy's blocks change in place (compaction), so such a sequence neither
  // takes a hit nor registers a block: 0.
  int32_t num_cacheable_tokens(int32_t block_size) const {
    if (is_token_level(eviction.policy)) return 0;
    auto n = static_cast<int64_t>(tokens.size());
    if (!evictions.empty()) n = std::min<int64_t>(n, evictions.front().at_computed);
    if (eviction.active()) {
      const int64_t interval = eviction.prefill_interval(block_size);
      n = std::min<int64_t>(n, (int64_t{eviction.budget_tokens} / interval + 1) * interval);
    }
    return static_cast<int32_t>(n);
  }
};

}  // namespace strata::engine

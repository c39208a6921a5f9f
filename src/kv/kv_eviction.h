#pragma once
// Block-wise token eviction (docs/kv-eviction.md): which of a sequence's blocks a policy gives
// back once the sequence holds more token slots than its budget, and PagedEviction's block
// score. KvCacheManager::evict_blocks takes the blocks out of the table; nothing here changes a
// pool or a table.
//
// A table's row (group 0, full attention) after evictions is compact: entry i holds KV slots
// [i * B, (i + 1) * B), the newest block partly filled, and the evicted positions are simply not
// there (positions keep counting from the sequence's full length: BlockTable::num_evicted_tokens).
// What a policy may take, for a table of L slots in n blocks, sink S, window W, budget N:
//
//   protected   the first ceil(S / B) entries (they hold positions 0 .. S-1: a sink block is
//               never evicted, so these are still the sequence's first blocks), every entry
//               holding one of the newest W slots (they are the newest W positions: the window
//               was protected at every earlier eviction too), and the newest entry (partly filled)
//   candidates  the others, in the policy's order: StreamingLLM the oldest first, PagedEviction
//               the lowest score first (ties: the older first)
//   evicted     candidates in that order while the slots left exceed N; none when L <= N
//
// So StreamingLLM keeps exactly the sink blocks and the newest blocks the budget leaves room for,
// at least those covering the window: L after <= max(N, ceil(S / B) * B + W + B - 1).
//
// Pure functions; cost O(n log n) per call (the score's cost: below).

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kv/kv_layout.h"
#include "strata/kv_eviction.h"

namespace strata::kv {

// The row entries to evict, ascending. num_tokens: the table's KV slots (L), in
// ceil(L / block_size) entries. block_scores: PagedEviction's score of each entry (ignored by
// StreamingLLM; one per entry). Empty when nothing is to go.
std::vector<int32_t> choose_evicted_blocks(const ResolvedKvEviction& policy, int32_t num_tokens,
                                           int32_t block_size,
                                           std::span<const float> block_scores = {});

// The most slots a sequence under `policy` holds at once, during a step included. Block-wise:
// after an eviction at most max(N, ceil(S / B) * B + max(W + B - 1, B)) (the budget, or the
// protected blocks' slots), and a step adds at most I = policy.prefill_interval(B) slots (a
// prefill chunk runs to the first multiple of I past the budget; a decode step adds one slot).
// H2O: N after an eviction, + I.
// SnapKV: the whole prompt (nothing goes before its end), then N + the generated tokens. Never
// more than num_prompt + max_tokens. A pool of ceil(this / B) + 1 blocks runs the sequence alone,
// however long it grows. policy must be active.
int64_t max_held_slots(const ResolvedKvEviction& policy, int32_t block_size, int64_t num_prompt,
                       int64_t max_tokens);

// ---- token-level policies (H2O, SnapKV) --------------------------------------------------------
//
// A table after token evictions holds its live tokens in slots [0, L) in no particular order of
// position (compaction moves the newest into the holes: KvCacheManager::compact_tokens), so the
// engine keeps each slot's position and score beside it. What a policy may take, for sink S,
// window W, budget N, and window_end (H2O: the sequence's length; SnapKV: the prompt's):
//
//   protected   slots holding positions < S (sinks) or >= window_end - W (the window), and
//               locked slots (in a block shared with another table: a fork's)
//   candidates  the others, lowest score first (ties: the lower position first)
//   evicted     candidates in that order while more than N slots are held; none when L <= N

// Compaction's moves, in slot indices: for a table of num_tokens slots losing `slots`
// (ascending, distinct), the (from, to) pairs that fill each hole below the new length
// K = num_tokens - slots.size() with the live slots at or past K: the i-th hole takes the i-th
// live one. No move writes another's source. KvCacheManager::compact_tokens makes the same moves
// in the pool; the engine makes them on what it keeps per slot (compact_slot_values).
std::vector<std::pair<int32_t, int32_t>> compaction_moves(int32_t num_tokens,
                                                          std::span<const int32_t> slots);

// Applies compaction_moves to one value per slot and drops the values past the new length.
template <class T>
void compact_slot_values(std::vector<T>& values, std::span<const int32_t> slots) {
  const auto n = static_cast<int32_t>(values.size());
  for (const auto& [from, to] : compaction_moves(n, slots)) {
    values[static_cast<size_t>(to)] = values[static_cast<size_t>(from)];
  }
  values.resize(values.size() - slots.size());
}

// The slots to evict, ascending. positions, scores: one per slot; locked: empty (none locked) or
// one per slot.
std::vector<int32_t> choose_evicted_tokens(const ResolvedKvEviction& policy,
                                           std::span<const int32_t> positions,
                                           std::span<const float> scores,
                                           std::span<const uint8_t> locked, int32_t window_end);

// SnapKV's smoothing of the observation window's attention over the prompt, so a token next to
// a strongly attended one is kept with it: out[i] = the largest (kMax: PyTorch's max_pool1d with
// padding k/2) or the mean (kAvg: avg_pool1d with zero padding and count_include_pad) of
// scores[i - k/2 .. i + k/2], the positions outside the span counting 0 in the mean. kernel odd
// and >= 1.
std::vector<float> pool_scores(std::span<const float> scores, int32_t kernel,
                               KvEvictionPooling pooling = KvEvictionPooling::kAvg);

// SnapKV per (layer, KV head): the slots each head gives up, head i's from its own scores
// (head_scores[i], one per slot, the window's protected and past the prompt included) by
// choose_evicted_tokens with the same positions and locks, so every head gives up the same count
// (their protected sets are the same). Empty when nothing is to go.
std::vector<std::vector<int32_t>> choose_evicted_tokens_per_head(
    const ResolvedKvEviction& policy, std::span<const int32_t> positions,
    std::span<const std::vector<float>> head_scores, std::span<const uint8_t> locked,
    int32_t window_end);

// Whether block_value_key_ratio can read every layer of the layout (F32, BF16, F16, FP8 with its
// static scales, INT8 with its per-token scales; not INT4).
bool can_score_blocks(const KvLayout& layout);

// PagedEviction's score of one block: the mean, over its first num_tokens tokens, every layer and
// every KV head, of ||V|| / ||K|| (the L2 norms of the token's V and K vectors; RoPE rotates K
// pairwise, so ||K|| does not depend on the position). A block whose values are small beside its
// keys contributes little to any attention output, whatever the query. block: the block's
// block_bytes, laid out by layout (can_score_blocks). A zero K counts as ||K|| = 1e-12.
// Cost: one pass over the block's K and V.
float block_value_key_ratio(const KvLayout& layout, const std::byte* block, int32_t num_tokens);

}  // namespace strata::kv

#pragma once
// KvEvictionParams: which of a sequence's KV blocks it gives back once it holds more token slots
// than its budget (part of the public API: EngineRequest::kv_eviction, EngineConfig::kv_eviction;
// docs/kv-eviction.md). Attention reads the blocks that stay as ordinary blocks.
//
// Block-wise (whole blocks leave the sequence's block table):
//   kStreamingLlm    keeps the blocks holding the first sink_tokens positions (attention sinks)
//                    and the newest blocks; evicts the oldest others first
//   kPagedEviction   keeps the same protected blocks, evicts the others lowest score first: a
//                    block's score is the mean over its tokens, layers and KV heads of
//                    ||V|| / ||K|| (PagedEviction, Chitty-Venkata et al. 2025)
// Token-level (single tokens go; compaction moves the newest live tokens into the holes, so
// the sequence holds ceil(kept / block_size) blocks):
//   kH2O             keeps the sinks and the newest window_tokens, evicts the others lowest
//                    accumulated attention mass first (Heavy-Hitter Oracle, Zhang et al. 2023):
//                    the mass every query so far gave the token, summed over layers and heads
//   kSnapKv          once, at the prompt's end: keeps the sinks and the prompt's last
//                    window_tokens (the observation window), and of the rest the tokens the
//                    window's queries attended to most (pooled over neighbouring positions),
//                    chosen per (layer, KV head) as the paper does, or once for all of them
//                    (selection kShared); generated tokens are all kept (SnapKV, Li et al. 2024)
//
// Plain data. Fields left unset (policy nullopt, budget 0, sink / window -1) take the engine's
// defaults (EngineConfig::kv_eviction, --kv-eviction-policy / --kv-budget-tokens) and then the
// policy's: resolve_kv_eviction() is the one place that merges and checks them.

#include <cstdint>
#include <optional>
#include <string_view>

#include "strata/status.h"

namespace strata {

enum class KvEvictionPolicy : uint8_t { kNone, kStreamingLlm, kPagedEviction, kH2O, kSnapKv };

// SnapKV's selection: each (layer, KV head) keeps its own budget_tokens tokens (the paper), or
// one set of tokens serves every layer and head.
enum class KvEvictionSelection : uint8_t { kPerHead, kShared };
// SnapKV's 1-D pooling of the window's attention over the key axis (zero padding, stride 1):
// the largest or the mean of pool_kernel neighbouring positions.
enum class KvEvictionPooling : uint8_t { kMax, kAvg };

// Whether the policy evicts single tokens (and compacts) rather than whole blocks.
constexpr bool is_token_level(KvEvictionPolicy policy) {
  return policy == KvEvictionPolicy::kH2O || policy == KvEvictionPolicy::kSnapKv;
}

// "none", "streaming_llm", "paged_eviction", "h2o", "snapkv".
const char* kv_eviction_policy_name(KvEvictionPolicy policy);
// The policy a name means (the names above), or nullopt.
std::optional<KvEvictionPolicy> parse_kv_eviction_policy(std::string_view name);
// "per_head", "shared"; "max", "avg"; and back (nullopt for another name).
const char* kv_eviction_selection_name(KvEvictionSelection selection);
std::optional<KvEvictionSelection> parse_kv_eviction_selection(std::string_view name);
const char* kv_eviction_pooling_name(KvEvictionPooling pooling);
std::optional<KvEvictionPooling> parse_kv_eviction_pooling(std::string_view name);

struct KvEvictionParams {
  // Most token slots a budget may name (and a sink or window): far beyond any context.
  static constexpr int32_t kMaxTokens = 1 << 30;
  // StreamingLLM's attention sinks when the request names none (the paper's 4).
  static constexpr int32_t kDefaultStreamingSinkTokens = 4;
  // SnapKV's observation window when the request names none (its reference code's 32), at most
  // half the budget.
  static constexpr int32_t kDefaultSnapKvWindowTokens = 32;
  // SnapKV's pooling kernel when the request names none (the paper's LongBench setting: 7, max).
  static constexpr int32_t kDefaultSnapKvPoolKernel = 7;
  static constexpr int32_t kMaxPoolKernel = 1023;

  std::optional<KvEvictionPolicy> policy;  // nullopt: the engine's default
  int32_t budget_tokens = 0;   // > 0: most slots held between steps; 0: the engine's default
  int32_t sink_tokens = -1;    // >= 0: positions 0 .. S-1 are never evicted; -1: the policy's
  int32_t window_tokens = -1;  // >= 0: the newest W positions are never evicted; -1: the policy's
  // SnapKV only (another policy naming them is InvalidArgument); unset: the engine's default if
  // it is SnapKV too, else per_head, max, 7.
  std::optional<KvEvictionSelection> selection = {};
  std::optional<KvEvictionPooling> pooling = {};
  int32_t pool_kernel = -1;  // odd, 1 .. kMaxPoolKernel; -1: unset
  // SnapKV only, for scoring a continuation (C++ API; `strata eval kv-eviction`): > 0 selects
  // after the prompt's first selection_at_tokens tokens instead of at its end, the observation
  // window their last window_tokens; the prompt's later tokens are then computed through the
  // evicted cache, as generated tokens would be (teacher-forced), and all kept. 0: the prompt's
  // end. Never taken from the engine's defaults.
  int32_t selection_at_tokens = 0;

  bool operator==(const KvEvictionParams&) const = default;
};

// What a sequence runs with: every field set.
struct ResolvedKvEviction {
  KvEvictionPolicy policy = KvEvictionPolicy::kNone;
  int32_t budget_tokens = 0;
  int32_t sink_tokens = 0;
  int32_t window_tokens = 0;
  // While the prompt is computed the policy runs every this many positions (and at the prompt's
  // end); a multiple of the block size, set by the engine (EngineConfig::
  // kv_eviction_prefill_interval_tokens). 0: every block.
  int32_t prefill_interval_tokens = 0;
  // SnapKV's (their defaults elsewhere, never read).
  KvEvictionSelection selection = KvEvictionSelection::kPerHead;
  KvEvictionPooling pooling = KvEvictionPooling::kMax;
  int32_t pool_kernel = 1;
  int32_t selection_at_tokens = 0;  // 0: the prompt's end

  bool active() const { return policy != KvEvictionPolicy::kNone; }
  // SnapKV choosing per (layer, KV head): compaction then moves each head's tokens apart.
  bool per_head() const {
    return policy == KvEvictionPolicy::kSnapKv && selection == KvEvictionSelection::kPerHead;
  }
  int32_t prefill_interval(int32_t block_size) const {
    return prefill_interval_tokens > 0 ? prefill_interval_tokens : block_size;
  }
  bool operator==(const ResolvedKvEviction&) const = default;
};

// InvalidArgument naming the first field out of range ("budget_tokens must be ..."): negative
// or too large counts, sink_tokens + window_tokens > budget_tokens when all are set, an even
// pool_kernel, SnapKV's fields with another named policy.
Status validate_kv_eviction(const KvEvictionParams& params);

// The request's fields over the defaults', then the policy's: sink 4 (StreamingLLM) or 0 (the
// others); window the rest of the budget (StreamingLLM), 0 (PagedEviction), half the budget
// (H2O's recent half), min(32, budget / 2) (SnapKV); SnapKV per_head, max pooling, kernel 7. A
// policy other than none needs a budget (the request's or the default's). InvalidArgument naming
// the field otherwise, or when sink + window exceed the budget.
Result<ResolvedKvEviction> resolve_kv_eviction(const std::optional<KvEvictionParams>& request,
                                               const KvEvictionParams& defaults);

}  // namespace strata

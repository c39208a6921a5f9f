#pragma once
// A request as the engine takes it (EngineRequest) and what it hands back for it each step
// (RequestOutput: one delta per sequence that advanced, with the request's metrics).

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/kv_eviction.h"
#include "strata/sampling_params.h"
#include "strata/token_output.h"

namespace strata {

using RequestId = uint64_t;

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids; when empty, prompt_text is encoded instead
  // Text, encoded with the model directory's tokenizer.json (special tokens added, as the
  // tokenizer's post-processor says). InvalidArgument when the directory has no tokenizer.
  std::string prompt_text;
  SamplingParams params;
  int32_t n = 1;           // sequences to generate from the prompt (their seeds: seed + i)
  std::string cache_salt;  // the client's prefix-cache salt
  std::string tenant;      // the engine salts each tenant's requests itself
  int32_t priority = 0;    // priority policy: lower runs first (vLLM's convention)
  // Scoring: return the logits at every prompt position in RequestOutput::prompt_logits. The
  // prompt is then computed whole (never served by the prefix cache, which it still fills).
  bool prompt_logits = false;
  // Token eviction (docs/kv-eviction.md): the blocks each sequence gives back once it holds more
  // than a budget of token slots; fields left unset take EngineConfig::kv_eviction's. nullopt:
  // that default as it is.
  std::optional<KvEvictionParams> kv_eviction;
  // Disaggregation (docs/kv.md): set by a decode instance while a prefill instance computes this
  // prompt, true until that call ends. The read of the prompt's blocks from the prefill instance
  // starts when the request is queued and waits for the blocks not there yet for as long as it
  // stays true (and --kv-peer-wait-ms after), so the transfer overlaps the prefill.
  std::shared_ptr<const std::atomic<bool>> remote_prefill_running;
};

// One sequence's progress in one step.
struct CompletionDelta {
  int32_t index = 0;                          // which of the request's n sequences
  std::vector<int32_t> token_ids;             // new tokens this step
  std::vector<TokenLogprobs> logprobs;        // one per new token when params.logprobs >= 0
  std::optional<FinishReason> finish_reason;  // set in the step it finishes
};

struct RequestMetrics {
  double arrival_time = 0.0;  // seconds on the engine's steady clock
  double first_scheduled_time = 0.0;
  double first_token_time = 0.0;  // 0 until the first token
  double finished_time = 0.0;     // 0 until finished
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache (first admission)
  // Of those, the ones the KV tiers brought back from host memory and from disk
  // (EngineConfig::kv_offload_bytes).
  int32_t num_host_tier_tokens = 0;
  int32_t num_disk_tier_tokens = 0;
  int32_t num_preemptions = 0;
  // Blocks (block-wise policies) and single tokens (token-level policies) token eviction took
  // from the request's sequences (each eviction once, not again when a recompute repeats it),
  // and the most blocks one of them held after a step.
  int32_t num_evicted_blocks = 0;
  int32_t num_evicted_tokens = 0;
  int32_t max_held_blocks = 0;
  // Token-level policies: the most blocks the same evictions would have left held without
  // compaction -- a block goes only once every token of it is evicted (the blocks, in position
  // order, that still hold a live token). What compaction saves is this over max_held_blocks.
  int32_t max_blocks_without_compaction = 0;
};

struct RequestOutput {
  RequestId id = 0;
  std::vector<CompletionDelta> deltas;  // the sequences that advanced or finished this step
  // Once, with the first delta, when params.prompt_logprobs >= 0 (the first entry is nullopt).
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  // Once, with the first delta, when the request set prompt_logits: [num_prompt, vocab]
  // row-major, row p the logits after prompt token p (the row that scores token p + 1).
  std::vector<float> prompt_logits;
  bool finished = false;  // every sequence finished (or the request was cancelled)
  bool cancelled = false;
  RequestMetrics metrics;
};

}  // namespace strata

#pragma once
// The token sampler of one sequence, on the CPU: penalties, greedy / temperature / min-p / top-k /
// top-p, a seeded reproducible draw, raw logprobs, and the stop-token rule. vLLM V1 semantics.
//
// Logit hygiene, the same everywhere in this file: a NaN logit is treated as -inf; a -inf logit
// is never sampled and has logprob -inf. A +inf logit is the limit of a huge one: the +inf tokens
// share all the probability equally (logprob -log(number of +inf tokens)). A row with no logit
// above -inf has no distribution: sampling it is an error (Status), its logprobs are all -inf.

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "strata/sampling_params.h"
#include "strata/token_output.h"

namespace strata::engine {

// TokenCounts: the token history the penalties read, for one sequence.
//
// Owns one entry per distinct token seen so far (in the prompt, the output or both) with whether
// it occurred in the prompt and how often in the output. Invariants: every entry's token is in
// [0, vocab_size); an entry has in_prompt or output_count > 0; entries never move or disappear
// (first-seen order), so penalties touch only these tokens, never the whole vocabulary.
// Cost: add_* is O(1) amortised per token (one hash lookup); memory O(distinct tokens).
// Not thread-safe; owned by the sequence, updated by the step loop as tokens are appended.
class TokenCounts {
 public:
  struct Entry {
    int32_t token = 0;
    bool in_prompt = false;
    int32_t output_count = 0;
  };

  explicit TokenCounts(int32_t vocab_size);

  // Tokens of the prompt (may be called in chunks, e.g. per prefill chunk). Ids in [0, vocab).
  void add_prompt(std::span<const int32_t> tokens);
  // One generated token, in [0, vocab).
  void add_output(int32_t token);

  bool in_prompt(int32_t token) const;
  int32_t output_count(int32_t token) const;
  int64_t num_output_tokens() const { return num_output_tokens_; }
  int32_t vocab_size() const { return vocab_size_; }
  std::span<const Entry> entries() const { return entries_; }

 private:
  Entry& entry_for(int32_t token);

  int32_t vocab_size_;
  int64_t num_output_tokens_ = 0;
  std::vector<Entry> entries_;
  std::unordered_map<int32_t, int32_t> entry_idx_;  // token -> index into entries_
};

// Applies the penalties of params to logits[vocab_size], in place, in vLLM's order: repetition
// (tokens in the prompt or the output: positive logits divided, others multiplied), then
// frequency and presence (output tokens only). Touches only counts.entries(). Exposed for tests.
void apply_penalties(std::span<double> logits, const TokenCounts& counts,
                     const SamplingParams& params);

// log_softmax of logits[vocab] (in double, stored as float) at `token` plus the top_k most likely
// tokens. Used for sampled tokens and for prompt logprobs (echo: the logits at position i - 1 and
// prompt token i). top_k >= 0; token in [0, vocab). Cost: O(vocab log top_k).
TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int32_t top_k);

struct SampleResult {
  int32_t token = -1;
  // Only when params.logprobs >= 0 (else 0 and empty): the chosen token's raw logprob and the
  // params.logprobs most likely alternatives, as compute_logprobs returns them.
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Sampler: turns one sequence's logits into its next token.
//
// Owns a copy of the (validated) params and the sequence's RNG: std::mt19937_64 seeded with
// params.seed when given (fully specified by the standard, so a seed means the same stream on
// every compiler), else from std::random_device. The output depends only on (params, seed, the
// logits and counts of this and earlier steps of this sequence): not on the batch, other
// sequences or threads.
//
// Pipeline, vLLM V1: copy the logits to double (NaN -> -inf); apply_penalties; if greedy():
// argmax, ties to the lowest id, no RNG draw. Otherwise: divide by temperature; min_p (keep tokens
// with prob >= min_p * max prob); top_k (keep the k largest, plus any tied with the k-th, as vLLM
// and HF do); top_p (sort the survivors by (prob desc, id asc), keep the shortest prefix whose
// renormalised mass reaches top_p: a token stays iff the mass strictly before it is < top_p,
// so at least one stays); renormalise; then exactly one draw (see sample()).
//
// Cost per step: O(vocab) passes, plus one exp per token that survives min_p and top_k (top_k:
// one pass with a k-entry heap), plus, when top_p < 1, O(n log n) for a nucleus of n tokens (the
// order is built in growing chunks, never a full sort of the vocab). The O(vocab) scratch buffers
// are thread_local, shared by every sampler on a thread, so a Sampler itself is ~2.5 KiB (RNG).
// Not thread-safe: one sequence, one thread at a time.
class Sampler {
 public:
  // params must pass params.validate(vocab_size) (checked).
  Sampler(const SamplingParams& params, int32_t vocab_size);

  // logits: [vocab_size], the model's raw logits for this sequence's next position; counts: the
  // sequence's history (same vocab_size). The draw, when not greedy: x = the RNG's next 64-bit
  // output, u = (x >> 11) * 2^-53 in [0, 1); walking tokens in ascending id order, the result is
  // the first token whose cumulative (unnormalised) weight exceeds u * total weight.
  // allowed, when not empty: a bitset over the vocabulary (bit id of word id / 64, at least
  // ceil(vocab_size / 64) words) of the tokens that may be picked (a constrained output's mask);
  // the others are -inf before penalties, temperature and the filters. Logprobs stay raw.
  // Error: InvalidArgument when no logit is above -inf (a broken forward pass), or none of the
  // allowed ones is.
  Result<SampleResult> sample(std::span<const float> logits, const TokenCounts& counts,
                              std::span<const uint64_t> allowed = {});

  // The distribution sample() draws from, [vocab_size], summing to 1 (one-hot when greedy);
  // excluded tokens are exactly 0. Does not touch the RNG. For tests and debugging.
  Result<std::vector<double>> probabilities(std::span<const float> logits,
                                            const TokenCounts& counts,
                                            std::span<const uint64_t> allowed = {}) const;

  // The seed of one draw made elsewhere (the GPU samples with it): the RNG's next output, so a
  // seeded request's device draws are reproducible and advance the stream like a host draw.
  uint64_t next_draw_seed() { return rng_(); }

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  // Leaves in `weights` the unnormalised distribution (0 = excluded) and returns the chosen
  // token when greedy, else -1. Error when no logit is above -inf.
  Result<int32_t> compute_weights(std::span<const float> logits, const TokenCounts& counts,
                                  std::span<const uint64_t> allowed,
                                  std::vector<double>& weights) const;

  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
};

// True when generating `token` ends the sequence: any of params.stop_token_ids always; one of the
// model's eos_token_ids unless params.ignore_eos. (max_tokens is the scheduler's check.)
bool is_stop_token(int32_t token, const SamplingParams& params,
                   std::span<const int32_t> eos_token_ids);

}  // namespace strata::engine

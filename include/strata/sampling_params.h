#pragma once
// SamplingParams: how one request turns logits into tokens, with the meanings vLLM (V1) and the
// OpenAI API give each field (part of the public API: EngineRequest::params). Plain data;
// validate() is the one place that checks the ranges, and everything downstream (Sampler, the
// scheduler's stop checks) assumes a validated struct.

#include <cstdint>
#include <optional>
#include <vector>

#include "strata/status.h"
#include "strata/structured_output.h"

namespace strata {

struct SamplingParams {
  // Most alternatives a request may ask for per token (logprobs, prompt_logprobs): vLLM's default
  // max_logprobs and the OpenAI API's limit.
  static constexpr int32_t kMaxLogprobs = 20;
  // A temperature below this samples greedily (vLLM's _SAMPLING_EPS): dividing by it would only
  // turn the distribution into an argmax with extra rounding.
  static constexpr float kGreedyTemperature = 1e-5f;
  // Bound on |presence_penalty| and |frequency_penalty| (OpenAI API).
  static constexpr float kMaxAbsPenalty = 2.0f;

  float temperature = 1.0f;      // >= 0; below kGreedyTemperature (e.g. 0) = greedy
  float top_p = 1.0f;            // in (0, 1]; 1 = off
  int32_t top_k = 0;             // 0 or -1 = off; 1 = greedy; larger than the vocab = off
  float min_p = 0.0f;            // in [0, 1]; 0 = off
  std::optional<uint64_t> seed;  // same seed, same params, same logits -> same tokens

  // > 0; 1 = off. Applies to every token seen in the prompt or the output (vLLM/HF): a positive
  // logit is divided by it, a non-positive one multiplied.
  float repetition_penalty = 1.0f;
  // In [-2, 2]; 0 = off. Apply to output tokens only (OpenAI):
  //   logit -= frequency_penalty * count + presence_penalty * (count > 0)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;

  int32_t max_tokens = 16;              // >= 1 generated tokens
  std::vector<int32_t> stop_token_ids;  // each in [0, vocab); always stop, even with ignore_eos
  bool ignore_eos = false;              // keep generating past the model's EOS tokens

  // -1 = none; K in 0..kMaxLogprobs = the chosen token's logprob plus the K most likely
  // alternatives, per generated token. Raw logprobs: log_softmax of the model's logits, before
  // penalties and temperature (vLLM's default logprobs mode).
  int32_t logprobs = -1;
  // -1 = none; K in 0..kMaxLogprobs = the same for every prompt token but the first (OpenAI echo).
  int32_t prompt_logprobs = -1;

  // What the output must be (JSON against a schema, a regex's match, one of a list); kNone = free
  // text. A constrained sequence samples on the host, its logits masked to the tokens that keep
  // the output a valid prefix; EOS and stop_token_ids end it only where the output is complete,
  // and end it there even with ignore_eos.
  StructuredOutput structured;

  // True when the sampler takes the argmax (ties to the lowest id) instead of drawing.
  bool greedy() const { return temperature < kGreedyTemperature || top_k == 1; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }

  // InvalidArgument naming the first out-of-range field (NaN and infinities are out of range
  // everywhere). vocab_size > 0 is the model's vocabulary, for the token-id checks.
  Status validate(int32_t vocab_size) const;
};

}  // namespace strata

#pragma once
// What a request produces, token by token, as the engine's API hands it out: why a sequence
// finished and a token's logprobs (part of the public API: strata/engine.h's RequestOutput).

#include <cstdint>
#include <utility>
#include <vector>

namespace strata {

enum class FinishReason { kLength, kStop };
const char* finish_reason_name(FinishReason reason);  // "length", "stop"

// One token's raw logprob and its most likely alternatives.
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.0f;
  // min(top_k, vocab) entries (token id, logprob), logprob descending, ties by id ascending.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

}  // namespace strata

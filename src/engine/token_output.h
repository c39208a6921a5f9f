#pragma once
// What a request produces, token by token, as the engine's API hands it out: why a sequence
// finished and a token's logprobs. Plain data with no engine internals behind it, so the public
// header (include/strata/engine.h) can name it without the scheduler's or the KV cache's types.

#include <cstdint>
#include <utility>
#include <vector>

namespace strata::engine {

enum class FinishReason { kLength, kStop };
const char* finish_reason_name(FinishReason reason);  // "length", "stop"

// One token's raw logprob and its most likely alternatives.
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.0f;
  // min(top_k, vocab) entries (token id, logprob), logprob descending, ties by id ascending.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

}  // namespace strata::engine

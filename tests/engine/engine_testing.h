#pragma once
// What the Engine suites share: a request's outputs gathered from the step outputs, greedy
// requests over synthetic prompts, and stepping an engine until every request has finished.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "strata/engine.h"

namespace strata::engine::test_util {

// What one request produced, gathered from the step outputs.
struct Collected {
  std::map<int32_t, std::vector<int32_t>> tokens;  // by sequence index
  std::map<int32_t, std::vector<TokenLogprobs>> logprobs;
  std::map<int32_t, FinishReason> finish;
  bool finished = false;
  bool cancelled = false;
  RequestMetrics metrics;
};

inline EngineRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens = 12,
                            int32_t logprobs = 20) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.params.logprobs = logprobs;
  return r;
}

// A deterministic prompt of len token ids below 120 (every test model's vocabulary holds them).
inline std::vector<int32_t> prompt_of(int32_t len, int32_t seed) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < len; ++i) p.push_back((i * 37 + seed * 101 + 7) % 120);
  return p;
}

inline void absorb(Collected& c, const RequestOutput& o) {
  for (const CompletionDelta& d : o.deltas) {
    auto& t = c.tokens[d.index];
    t.insert(t.end(), d.token_ids.begin(), d.token_ids.end());
    auto& l = c.logprobs[d.index];
    l.insert(l.end(), d.logprobs.begin(), d.logprobs.end());
    if (d.finish_reason) c.finish[d.index] = *d.finish_reason;
  }
  c.finished |= o.finished;
  c.cancelled |= o.cancelled;
  c.metrics = o.metrics;
}

// Steps until every request finished; no step may fail, and after every step the live token
// slots fit the pool.
inline std::map<RequestId, Collected> drain(Engine& e) {
  std::map<RequestId, Collected> out;
  int guard = 0;
  while (e.has_unfinished()) {
    auto step = e.step();
    EXPECT_TRUE(step.ok()) << step.status().to_string();
    if (!step.ok() || ++guard > 100000) break;
    EXPECT_LE(e.last_step().live_token_slots, e.last_step().capacity_token_slots);
    for (const RequestOutput& o : *step) absorb(out[o.id], o);
  }
  return out;
}

}  // namespace strata::engine::test_util

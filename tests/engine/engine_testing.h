#pragma once
// What the Engine suites share: a request's outputs gathered from the step outputs, greedy
// requests over synthetic prompts, stepping an engine until every request has finished, and
// every prompt position's logits of a batch of prompts.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "strata/engine.h"

namespace strata::engine::test_util {

// What one request produced, gathered from the step outputs.
struct Collected {
  std::map<int32_t, std::vector<int32_t>> tokens;  // by sequence index
  std::map<int32_t, std::vector<TokenLogprobs>> logprobs;
  std::map<int32_t, FinishReason> finish;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;  // params.prompt_logprobs >= 0
  std::vector<float> prompt_logits;                           // request.prompt_logits
  bool finished = false;
  bool cancelled = false;
  RequestMetrics metrics;
};

// The mistral-swa fixture (two layers, a 64-token window) in a scratch directory, its
// config.json marking layer 0 full attention: a hybrid model of two KV cache groups.
inline std::filesystem::path hybrid_model_dir() {
  namespace fs = std::filesystem;
  const fs::path from = fs::path(STRATA_TEST_DATA_DIR) / "models" / "mistral-swa";
  const fs::path to = fs::path(::testing::TempDir()) / ("hybrid-" + std::to_string(getpid()));
  fs::remove_all(to);
  fs::create_directories(to);
  for (const fs::directory_entry& e : fs::directory_iterator(from)) {
    fs::copy_file(e.path(), to / e.path().filename());
  }
  std::ifstream in(from / "config.json");
  std::stringstream config;
  config << in.rdbuf();
  std::string text = config.str();
  const size_t open = text.find('{');
  text.insert(open + 1, "\n  \"layer_types\": [\"full_attention\", \"sliding_attention\"],");
  std::ofstream(to / "config.json", std::ios::trunc) << text;
  return to;
}

// An INT4 cache's newest-blocks group (its full-precision pool), or a group of 0 blocks when the
// engine has none.
inline KvGroupStats newest_blocks_group(const Engine& e) {
  for (const KvGroupStats& g : e.kv_groups()) {
    if (g.newest_blocks > 0) return g;
  }
  return {};
}

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
  if (!o.prompt_logprobs.empty()) c.prompt_logprobs = o.prompt_logprobs;
  if (!o.prompt_logits.empty()) c.prompt_logits = o.prompt_logits;
  c.finished |= o.finished;
  c.cancelled |= o.cancelled;
  c.metrics = o.metrics;
}

// Steps until every request finished, or max_steps steps, adding every output to what `out`
// collected so far; no step may fail, and after every step the live token slots fit the pool.
inline void drain_into(Engine& e, std::map<RequestId, Collected>& out, int max_steps = 100000) {
  for (int steps = 0; steps < max_steps && e.has_unfinished(); ++steps) {
    auto step = e.step();
    EXPECT_TRUE(step.ok()) << step.status().to_string();
    if (!step.ok()) break;
    EXPECT_LE(e.last_step().live_token_slots, e.last_step().capacity_token_slots);
    for (const RequestOutput& o : *step) absorb(out[o.id], o);
  }
}

// Steps until every request finished (drain_into).
inline std::map<RequestId, Collected> drain(Engine& e) {
  std::map<RequestId, Collected> out;
  drain_into(e, out);
  return out;
}

// A pool for requests that all run at once, with no
// watermark, which would keep a pool that tight from admitting the last of them: each request's
// kv::blocks_needed_per_request for its prompt + max_tokens, + the null block. window: the
// model's kv::pool_sliding_window.
inline EngineConfig sized_for(EngineConfig c, const std::vector<EngineRequest>& requests,
                              int32_t window) {
  int64_t blocks = 1;
  for (const EngineRequest& r : requests) {
    blocks += kv::blocks_needed_per_request(
        static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens, window,
        c.max_num_batched_tokens, c.block_size);
  }
  c.num_blocks = static_cast<int32_t>(blocks);
  c.watermark = 0.0;
  return c;
}

// Submits the requests together (one batch) to an engine over model sized for them (sized_for,
// with the model's window) and steps it until they finish: what each request returned, in
// request order, or the first refused request's status. No step may fail and no block leak.
inline Result<std::vector<Collected>> run_together(model::Model& model, ThreadPool& pool,
                                                   const std::vector<EngineRequest>& requests,
                                                   const EngineConfig& config = {}) {
  auto e = engine::create_engine(
      model, pool,
      sized_for(config, requests, kv::pool_sliding_window(model.config().layer_sliding_window)));
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return e.status();
  std::vector<RequestId> ids;
  for (const EngineRequest& r : requests) {
    auto id = (*e)->submit(r);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  std::map<RequestId, Collected> got = drain(**e);
  EXPECT_EQ((*e)->last_step().num_used_blocks, 0) << "blocks leaked";
  std::vector<Collected> out;
  for (const RequestId id : ids) out.push_back(std::move(got[id]));
  return out;
}

// The logits at every position of each prompt (prompt_logits requests, one greedy token each),
// run together (run_together).
inline std::vector<std::vector<float>> prompt_logits(model::Model& model, ThreadPool& pool,
                                                     const std::vector<std::vector<int32_t>>& prompts,
                                                     const EngineConfig& config = {}) {
  std::vector<EngineRequest> requests;
  for (const std::vector<int32_t>& p : prompts) {
    requests.push_back(greedy(p, 1, -1));
    requests.back().prompt_logits = true;
  }
  auto got = run_together(model, pool, requests, config);
  EXPECT_TRUE(got.ok()) << got.status().to_string();
  if (!got.ok()) return {};
  std::vector<std::vector<float>> out;
  for (Collected& c : *got) out.push_back(std::move(c.prompt_logits));
  return out;
}

// A 64-token prompt run to the end, then the same prompt plus five tokens on the same engine
// (whose prefix cache may now serve it): the second request and what it produced.
struct PrefixRun {
  EngineRequest second;
  Collected got;
};
inline PrefixRun run_extended_prompt(Engine& e, int32_t logprobs = 20) {
  const std::vector<int32_t> shared = prompt_of(64, 3);
  std::vector<int32_t> extended = shared;
  extended.insert(extended.end(), {5, 6, 7, 8, 9});
  *e.submit(greedy(shared, 12, logprobs));
  drain(e);
  PrefixRun run{greedy(std::move(extended), 12, logprobs), {}};
  const RequestId id = *e.submit(run.second);
  run.got = drain(e)[id];
  return run;
}

// A pool of 12 blocks, 64-token chunks and no watermark on top of c: n requests of 4-5 blocks
// each (submit_preempted) keep it preempting. swap_space_bytes: small, since the default 4 GiB
// takes seconds to allocate.
inline EngineConfig preempting(EngineConfig c, PreemptionMode mode,
                               int64_t swap_space_bytes = int64_t{8} << 20) {
  c.num_blocks = 1 + 12;
  c.max_num_batched_tokens = 64;
  c.watermark = 0.0;
  c.preemption_mode = mode;
  c.swap_space_bytes = swap_space_bytes;
  return c;
}

struct Submitted {
  std::vector<EngineRequest> requests;
  std::vector<RequestId> ids;
};

// Submits n greedy requests of 40 + i prompt tokens and 24 output tokens.
inline Submitted submit_preempted(Engine& e, int32_t n, int32_t logprobs = 20) {
  Submitted s;
  for (int32_t i = 0; i < n; ++i) {
    s.requests.push_back(greedy(prompt_of(40 + i, i), 24, logprobs));
    s.ids.push_back(*e.submit(s.requests.back()));
  }
  return s;
}

// After a run under `preempting`: something was preempted, and with swap every block that went
// out came back (with recompute none went out).
inline void expect_preemption_totals(const Engine& e, PreemptionMode mode) {
  EXPECT_GT(e.totals().num_preemptions, 0);
  if (mode == PreemptionMode::kSwap) {
    EXPECT_GT(e.totals().num_swapped_out_blocks, 0);
    EXPECT_EQ(e.totals().num_swapped_in_blocks, e.totals().num_swapped_out_blocks)
        << "every swapped block came back";
  } else {
    EXPECT_EQ(e.totals().num_swapped_out_blocks, 0);
  }
}

}  // namespace strata::engine::test_util

#pragma once
// `strata eval kv-eviction`: what token eviction (docs/kv-eviction.md) costs against the full
// cache, per policy and budget (a share of the context): mean KL and top-1 agreement of held-out
// text windows, teacher-forced, measured two ways -- at every position of the whole window (the
// window is a prompt, and eviction runs while it is computed; not SnapKV, which evicts once after
// its prompt) and at the continuation's positions only, each window split into a prompt (its
// first window_len - continuation_len tokens; the budget a share of it) and a continuation (SnapKV
// selects once after the prompt, every other policy runs as in the whole window) -- the blocks
// each window's sequence held at most, and paired needle accuracy.

#include <cstdint>
#include <string>

#include "eval_logits_kl.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct EvalKvEvictionOptions : QualityEvalOptions {
  std::string model_dir;
  std::string policies = "streaming_llm,paged_eviction";
  std::string budgets = "0.125,0.25,0.5";  // shares of the window / needle context
  int32_t sink_tokens = -1;                // -1: each policy's default
  int32_t window_tokens = -1;
  // SnapKV: one row per selection (per_head, shared), paired in the same run; pooling and kernel
  // (empty / -1: the policy's max, 7).
  std::string snapkv_selections = "per_head";
  std::string pooling;
  int32_t pool_kernel = -1;
  // The continuation's tokens at the end of each window (-1: window_len / 8; 0: no split), and
  // whether to leave out the whole-window measure.
  int32_t continuation_len = -1;
  bool continuation_only = false;
};

void add_eval_kv_eviction_command(CLI::App& eval, EvalKvEvictionOptions& o, std::string& task);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_eval_kv_eviction(const EvalKvEvictionOptions& o);

}  // namespace strata::cli

#pragma once
// `strata eval kv-eviction`: what token eviction (docs/kv-eviction.md) costs against the full
// cache, per policy and budget (a share of the context): mean KL and top-1 agreement at every
// position of held-out text windows (teacher-forced: the windows are prompts, and eviction runs
// while they are computed), the blocks each window's sequence held at most, and paired needle
// accuracy.

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace strata::cli {

struct EvalKvEvictionOptions {
  std::string model_dir;
  std::string policies = "streaming_llm,paged_eviction";
  std::string budgets = "0.125,0.25,0.5";  // shares of the window / needle context
  int32_t sink_tokens = -1;                // -1: each policy's default
  int32_t window_tokens = -1;
  std::string text;  // held-out text; default: the model's needle_filler.txt
  int32_t num_windows = 4;
  int32_t window_len = 2048;
  std::string needle_contexts = "2048";
  std::string needle_depths = "0,0.25,...,1";
  int32_t needle_trials = 20;  // per (context, depth); 0 = no needle
  uint64_t seed = 0;
  int32_t threads = 0;
  int32_t block_size = 16;
  int32_t max_num_seqs = 8;
  bool json = false;
};

void add_eval_kv_eviction_command(CLI::App& eval, EvalKvEvictionOptions& o, std::string& task);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_eval_kv_eviction(const EvalKvEvictionOptions& o);

}  // namespace strata::cli

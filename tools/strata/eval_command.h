#pragma once
// `strata eval needle`: pass-key retrieval accuracy by context length and needle depth, on prompts
// built from the model's own filler text (src/eval/needle_prompt.h), run through the engine, and
// reported as a table, as JSON (with every prompt's result, for paired comparisons between
// engine configurations) and as an SVG heatmap.

#include <cstdint>
#include <string>

#include "eval_kv_eviction.h"
#include "eval_kv_quant.h"
#include "kv_cache_options.h"
#include "kv_eviction_flags.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct EvalNeedleOptions {
  std::string model_dir;
  std::string contexts = "512,1024,2048,4096";
  std::string depths = "0,0.1,...,1";
  int32_t trials = 3;
  uint64_t seed = 0;
  bool json = false;
  std::string plot;  // SVG heatmap file; empty = none
  int32_t threads = 0;
  int32_t block_size = 16;
  int32_t max_num_seqs = 8;
  int32_t max_num_batched_tokens = 4096;
  bool enable_prefix_caching = true;
  KvCacheOptions kv_cache;
  // Token eviction for every prompt (docs/kv-eviction.md): none, streaming_llm, paged_eviction,
  // h2o, snapkv.
  std::string kv_eviction_policy = "none";
  int32_t kv_budget_tokens = 0;
  int32_t kv_sink_tokens = -1;
  int32_t kv_window_tokens = -1;
  std::string kv_snapkv_selection;  // empty: per_head
  std::string kv_pooling;           // empty: max
  int32_t kv_pool_kernel = -1;      // -1: 7
};

struct EvalOptions {
  std::string task;  // the subcommand given: "needle", "kv-quant" or "kv-eviction"
  EvalNeedleOptions needle;
  EvalKvQuantOptions kv_quant;
  EvalKvEvictionOptions kv_eviction;
};

void add_eval_command(CLI::App& app, EvalOptions& options);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_eval(const EvalOptions& options);

}  // namespace strata::cli

#pragma once
// `strata eval kv-quant`: what a quantized KV cache costs in quality, against the unquantized
// (float32) cache on the same model and inputs (docs/kv-quant.md):
//   - mean KL(p_ref || p_quant) of the next-token distributions, and top-1 agreement, at every
//     position of held-out text windows (teacher forced);
//   - paired pass-key (needle) accuracy on the same prompts for every dtype, with the discordant
//     pairs (reference right / quantized wrong, and the reverse).

#include <cstdint>
#include <string>

#include "engine/kv_quant_check.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct EvalKvQuantOptions {
  std::string model_dir;
  std::string kv_cache_dtypes = "fp8,fp8_e5m2,int8";
  bool calculate_kv_scales = true;   // FP8: --no-calculate-kv-scales reads the checkpoint's
  bool allow_unit_kv_scales = false;
  std::string skip_layers;           // --kv-cache-dtype-skip-layers, applied to every dtype
  bool kv_quant_check = false;       // --kv-quant-check, run for every dtype
  double kv_quant_check_threshold = kDefaultKvQuantCheckThreshold;
  int32_t kv_int4_residual = 0;      // --kv-int4-residual for int4 (0 = one block)
  std::string text;                  // held-out text; default: the model's needle_filler.txt
  int32_t num_windows = 8;           // text windows for the KL
  int32_t window_len = 512;          // tokens per window
  std::string needle_contexts = "1024";
  std::string needle_depths = "0,0.25,...,1";
  int32_t needle_trials = 200;       // per (context, depth): 1,000 prompts by default
  uint64_t seed = 0;
  int32_t threads = 0;
  int32_t block_size = 16;
  int32_t max_num_seqs = 8;
  bool json = false;
};

void add_eval_kv_quant_command(CLI::App& eval, EvalKvQuantOptions& o, std::string& task);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_eval_kv_quant(const EvalKvQuantOptions& o);

}  // namespace strata::cli

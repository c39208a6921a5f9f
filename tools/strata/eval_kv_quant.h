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
#include "eval_logits_kl.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct EvalKvQuantOptions : QualityEvalOptions {
  std::string model_dir;
  std::string kv_cache_dtypes = "fp8,fp8_e5m2,int8";
  bool calculate_kv_scales = true;   // FP8: --no-calculate-kv-scales reads the checkpoint's
  bool allow_unit_kv_scales = false;
  std::string skip_layers;           // --kv-cache-dtype-skip-layers, applied to every dtype
  bool kv_quant_check = false;       // --kv-quant-check, run for every dtype
  double kv_quant_check_threshold = kDefaultKvQuantCheckThreshold;
  int32_t kv_int4_residual = 0;      // --kv-int4-residual for int4 (0 = one block)

  // 8 windows of 512 tokens for the KL; 200 needle prompts per depth at 1,024 tokens (1,000).
  EvalKvQuantOptions() {
    num_windows = 8;
    window_len = 512;
    needle_contexts = "1024";
    needle_trials = 200;
  }
};

void add_eval_kv_quant_command(CLI::App& eval, EvalKvQuantOptions& o, std::string& task);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_eval_kv_quant(const EvalKvQuantOptions& o);

}  // namespace strata::cli

#pragma once
// What `strata eval kv-quant` and `strata eval kv-eviction` share: their common options, the
// held-out text windows they score, and the comparison of two runs' logits at every position (mean
// KL of the candidate's distribution from the reference's, and how often their argmax agrees).

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}

namespace strata::cli {

// The options both evals take: the text windows scored for the KL, the needle prompts, the
// engine's size, the output. Each eval sets its own defaults in its options' constructor.
struct QualityEvalOptions {
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

// Registers --text, --num-windows, --window-len, --needle-contexts, --needle-depths,
// --needle-trials, --seed, --threads, --block-size, --max-num-seqs and --json on cmd.
void add_quality_eval_options(CLI::App& cmd, QualityEvalOptions& o);

// num_windows consecutive windows of window_len token ids from text (the model directory's
// needle_filler.txt when empty), no special tokens. strata::Error when the file cannot be read or
// is too short.
std::vector<std::vector<int32_t>> text_windows(const tokenizer::Tokenizer& tok,
                                               const std::string& model_dir,
                                               const std::string& text, int32_t num_windows,
                                               int32_t window_len);

struct LogitsComparison {
  double mean_kl = 0.0;         // nats, KL(reference || candidate), per position
  double top1_agreement = 0.0;  // share of positions whose argmax agrees
  int64_t num_positions = 0;
};

// ref[w] and q[w]: window w's logits, [positions, vocab] row-major, the same shape. Rows before
// first_row (of every window) are left out.
LogitsComparison compare_logits(const std::vector<std::vector<float>>& ref,
                                const std::vector<std::vector<float>>& q, int64_t vocab,
                                int64_t first_row = 0);

}  // namespace strata::cli

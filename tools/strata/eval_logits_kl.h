#pragma once
// What `strata eval kv-quant` and `strata eval kv-eviction` share: the held-out text windows they
// score, and the comparison of two runs' logits at every position (mean KL of the candidate's
// distribution from the reference's, and how often their argmax agrees).

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace strata::cli {

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

// ref[w] and q[w]: window w's logits, [positions, vocab] row-major, the same shape.
LogitsComparison compare_logits(const std::vector<std::vector<float>>& ref,
                                const std::vector<std::vector<float>>& q, int64_t vocab);

}  // namespace strata::cli

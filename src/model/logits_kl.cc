#include "model/logits_kl.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace strata::model {
namespace {

// log(sum exp(row)), in double.
double log_sum_exp(const float* row, int64_t vocab) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
  return std::log(sum) + max;
}

}  // namespace

// No per-row buffers: a model's vocabulary is 128K entries and --kv-quant-check takes this over
// every calibration row of every pass.
double kl_of_logits(const float* p_logits, const float* q_logits, int64_t vocab) {
  const double lse_p = log_sum_exp(p_logits, vocab);
  const double lse_q = log_sum_exp(q_logits, vocab);
  double kl = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double lp = p_logits[i] - lse_p;
    kl += std::exp(lp) * (lp - (q_logits[i] - lse_q));
  }
  return std::max(kl, 0.0);
}

double mean_kl_of_logits(std::span<const float> p_logits, std::span<const float> q_logits,
                         int64_t vocab, ThreadPool& pool) {
  STRATA_CHECK(vocab > 0 && p_logits.size() == q_logits.size() &&
                   p_logits.size() % static_cast<size_t>(vocab) == 0,
               "mean_kl_of_logits: two [rows x vocab] arrays");
  const auto rows = static_cast<int64_t>(p_logits.size()) / vocab;
  if (rows == 0) return 0.0;
  std::vector<double> kl(static_cast<size_t>(rows));
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      kl[static_cast<size_t>(r)] =
          kl_of_logits(p_logits.data() + r * vocab, q_logits.data() + r * vocab, vocab);
    }
  });
  double sum = 0.0;
  for (const double k : kl) sum += k;  // in row order, whatever the threads
  return sum / static_cast<double>(rows);
}

}  // namespace strata::model

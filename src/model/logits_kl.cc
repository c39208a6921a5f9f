#include "model/logits_kl.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace strata::model {
namespace {

// log(sum exp(row)), in double: the one exp per logit a KL row takes.
double log_sum_exp(const float* row, int64_t vocab) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
  return std::log(sum) + max;
}

}  // namespace

KlReference::KlReference(std::span<float> p_logits, int64_t vocab, ThreadPool& pool)
    : p_(p_logits), logits_(p_logits.begin(), p_logits.end()), vocab_(vocab) {
  STRATA_CHECK(vocab > 0 && p_logits.size() % static_cast<size_t>(vocab) == 0,
               "KlReference: a [rows x vocab] array");
  rows_ = static_cast<int64_t>(p_logits.size()) / vocab;
  lse_.assign(static_cast<size_t>(rows_), 0.0);
  mass_.assign(static_cast<size_t>(rows_), 0.0);
  pool.parallel_for(rows_, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = p_logits.data() + r * vocab;
      const double lse = log_sum_exp(row, vocab);
      double mass = 0.0;
      for (int64_t i = 0; i < vocab; ++i) {
        row[i] = static_cast<float>(std::exp(row[i] - lse));
        mass += row[i];  // the stored (float) p, as mean_kl multiplies by
      }
      lse_[static_cast<size_t>(r)] = lse;
      mass_[static_cast<size_t>(r)] = mass;
    }
  });
}

// No per-row buffers: a model's vocabulary is 128K entries and --kv-quant-check takes this over
// every calibration row of every pass.
double KlReference::mean_kl(std::span<const float> q_logits, ThreadPool& pool) const {
  STRATA_CHECK(q_logits.size() == p_.size(), "KlReference::mean_kl: q's size differs from p's");
  if (rows_ == 0) return 0.0;
  std::vector<double> kl(static_cast<size_t>(rows_));
  pool.parallel_for(rows_, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* p = p_.data() + r * vocab_;
      const float* p_logit = logits_.data() + r * vocab_;
      const float* q = q_logits.data() + r * vocab_;
      double weighted_diff = 0.0;
      for (int64_t i = 0; i < vocab_; ++i) {
        weighted_diff += static_cast<double>(p[i]) * (static_cast<double>(p_logit[i]) - q[i]);
      }
      const auto at = static_cast<size_t>(r);
      const double row_kl = weighted_diff + (log_sum_exp(q, vocab_) - lse_[at]) * mass_[at];
      kl[at] = std::max(row_kl, 0.0);
    }
  });
  double sum = 0.0;
  for (const double k : kl) sum += k;  // in row order, whatever the threads
  return sum / static_cast<double>(rows_);
}

}  // namespace strata::model

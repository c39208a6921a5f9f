#pragma once
// KL divergence between two models' next-token distributions, row by row over their logits:
// what --kv-quant-check decides by (engine/kv_quant_check.h), on either device's logits.

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"

namespace strata::model {

// The reference side p of KL(p || q) over [rows x vocab] row-major logits, prepared once for
// the many q the check compares with it: the logits become their softmax probabilities in place
// (the span must outlive this object), and each row keeps sum p log p and sum p. A KL row then
// costs one exp per logit (q's log-sum-exp) instead of three:
//   KL(p || q) = sum p (log p - q) + lse(q) sum p,
// where every sum uses the stored p, so the result is the KL weighted by exactly those p.
class KlReference {
 public:
  KlReference(std::span<float> p_logits, int64_t vocab, ThreadPool& pool);

  int64_t rows() const { return rows_; }

  // The mean over rows of KL(p || q) in nats, for q_logits [rows x vocab] (rows split over the
  // pool's threads, summed in row order). Each row's KL is clamped at 0 (rounding); 0 for no
  // rows.
  double mean_kl(std::span<const float> q_logits, ThreadPool& pool) const;

 private:
  std::span<const float> p_;   // probabilities, [rows x vocab]
  int64_t vocab_ = 0;
  int64_t rows_ = 0;
  std::vector<double> p_log_p_;  // per row: sum p log p
  std::vector<double> mass_;     // per row: sum p (1 up to rounding)
};

}  // namespace strata::model

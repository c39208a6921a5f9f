#pragma once
// KL divergence between two models' next-token distributions, row by row over their logits:
// what --kv-quant-check decides by (engine/kv_quant_check.h), on either device's logits.

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"

namespace strata::model {

// The reference side p of KL(p || q) over [rows x vocab] row-major logits, prepared once for
// the many q the check compares with it. The reference keeps a copy of the logits and each row's
// log-sum-exp; the span's entries become p's softmax probabilities in place (the caller's buffer,
// pinned on the GPU, is reused for them; it must outlive this object). A KL row then costs one
// exp per logit (q's log-sum-exp) instead of three:
//   KL(p || q) = sum p (p_logit - q_logit) + (lse(q) - lse(p)) sum p,
// every sum over the stored p, so the result is the KL weighted by exactly those p. Identical
// logits give exactly 0: each difference is 0, and both log-sum-exps are the same computation.
class KlReference {
 public:
  KlReference(std::span<float> p_logits, int64_t vocab, ThreadPool& pool);

  int64_t rows() const { return rows_; }

  // The mean over rows of KL(p || q) in nats, for q_logits [rows x vocab] (rows split over the
  // pool's threads, summed in row order). Each row's KL is clamped at 0 (rounding); 0 for no
  // rows.
  double mean_kl(std::span<const float> q_logits, ThreadPool& pool) const;

 private:
  std::span<const float> p_;     // probabilities, [rows x vocab] (the caller's buffer)
  std::vector<float> logits_;    // p's logits, [rows x vocab]
  int64_t vocab_ = 0;
  int64_t rows_ = 0;
  std::vector<double> lse_;      // per row: log sum exp of the logits
  std::vector<double> mass_;     // per row: sum p (1 up to rounding)
};

}  // namespace strata::model

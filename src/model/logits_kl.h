#pragma once
// KL divergence between two models' next-token distributions, row by row over their logits:
// what --kv-quant-check decides by (engine/kv_quant_check.h), on either device's logits.

#include <cstdint>
#include <span>

#include "core/thread_pool.h"

namespace strata::model {

// KL(p || q) in nats of the softmaxes of two logit rows of `vocab` entries, in double; never
// negative (rounding clamps at 0).
double kl_of_logits(const float* p_logits, const float* q_logits, int64_t vocab);

// The mean of kl_of_logits over the rows of two [rows x vocab] row-major logit arrays of the
// same size (rows split over the pool's threads). 0 for no rows.
double mean_kl_of_logits(std::span<const float> p_logits, std::span<const float> q_logits,
                         int64_t vocab, ThreadPool& pool);

}  // namespace strata::model

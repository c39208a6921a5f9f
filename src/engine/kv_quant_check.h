#pragma once
// --kv-quant-check (docs/kv-quant.md, "Per-layer exceptions"): at start-up, measure what the
// quantized KV cache does to each layer and keep the layers it hurts at model precision.
//
// Over the calibration prompt (engine::kv_calibration_tokens, the text --calculate-kv-scales
// uses), two figures per layer l:
//   output KL   the decision figure (Model::kv_quant_output_kl): the mean over every position of
//               KL(p || p_l) in nats, p the next-token distribution with an F32 cache and p_l
//               the one where only layer l holds the quantized dtype -- what quantizing that
//               layer costs at the output, propagated through the layers after it, in the units
//               `strata eval kv-quant` reports for the whole model. num_layers + 1 passes.
//   attn error  a diagnostic (Model::kv_quant_error): ||o_q - o|| / ||o|| of layer l's
//               attention output, same queries, K/V read quantized vs F32 -- the format's own
//               rounding floor (about 2^-mantissa bits) unless the layer's values or scales are
//               pathological. On strata-tiny it does not rank layers by their effect on the
//               output (docs/kv-quant.md measures this), which is why it does not decide.
// A layer is kept when its output KL exceeds the threshold (--kv-quant-check-threshold).

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "strata/kv_quant_check_report.h"

namespace strata {
class ThreadPool;
namespace kv {
class KvLayout;
}
namespace model {
class Model;
}
}  // namespace strata

namespace strata::engine {

// Figures per layer -> the report (kept = output_kl > threshold; a NaN is kept too).
KvQuantCheckReport kv_quant_check_report(DType dtype, double threshold, int32_t num_tokens,
                                         std::span<const double> output_kl,
                                         std::span<const double> attn_error);

// Runs the check for `quantized` (a uniform layout of the model's shape at block size 16, the
// dtype and FP8 scales under test) over tokens. Errors of the forward pass come back as is.
Result<KvQuantCheckReport> run_kv_quant_check(model::Model& model, ThreadPool& pool,
                                              std::span<const int32_t> tokens,
                                              const kv::KvLayout& quantized, double threshold,
                                              const KvQuantCheckProgress& progress = {});

// The per-layer table for stderr, one line per layer and a summary line, e.g.
//   strata: kv-quant-check fp8_e5m2 over 293 calibration tokens, threshold 0.01 (...):
//     layer  output KL  attn error  kept
//     0      9.4e-03    6.5e-02     yes, float32
//     1      5.0e-04    9.5e-02
//     ...
//   strata: kv-quant-check keeps layers 0 at float32; 5 of 6 layers fp8_e5m2
std::string format_kv_quant_check(const KvQuantCheckReport& report, DType full_precision);

}  // namespace strata::engine

#pragma once
// FP8 KV cache scales (docs/kv-quant.md): the per-layer static scales a calibrated checkpoint
// carries, and the ones --calculate-kv-scales computes at start-up.
//
// Checkpoint names, per layer N (the first form found wins; vLLM reads the same ones):
//   model.layers.N.self_attn.k_scale / .v_scale                 llm-compressor, ModelOpt, vLLM
//   model.layers.N.self_attn.k_proj.output_scale / v_proj...    compressed-tensors (older)
//   model.layers.N.self_attn.kv_scale                           older AutoFP8: one for K and V
// Each is a scalar (shape [] or [1]) F32/BF16/F16 tensor; real value = fp8 value * scale.

#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "core/dtype.h"
#include "kv/kv_layout.h"
#include "model/weight_store.h"

namespace strata::model {

// The checkpoint's scales for num_layers layers, or nullopt when it has none at all. Throws
// strata::Error when only some layers have them or a scale is not a finite positive scalar.
std::optional<kv::KvStaticScales> read_checkpoint_kv_scales(const WeightStore& weights,
                                                            int32_t num_layers);

// Scales from per-layer (max |k|, max |v|): max / the fp8 format's largest finite value (448 for
// e4m3, 57344 for e5m2), so the largest calibration value maps to the format's max; 1.0 for a
// layer whose maximum is 0 (any scale stores zeros exactly). fp8_dtype: F8E4M3 or F8E5M2.
kv::KvStaticScales kv_scales_from_abs_max(std::span<const std::pair<float, float>> abs_max,
                                          DType fp8_dtype);

}  // namespace strata::model

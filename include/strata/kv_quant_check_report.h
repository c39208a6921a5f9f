#pragma once
// What --kv-quant-check measured (EngineConfig::kv_quant_check; docs/kv-quant.md, "Per-layer
// exceptions"): per layer, the output KL that decides whether the layer keeps model precision and
// the attention error beside it. The check itself is the engine's (src/engine/kv_quant_check.h).

#include <cstdint>
#include <functional>
#include <vector>

#include "strata/dtype.h"

namespace strata {

// The default --kv-quant-check-threshold, in nats of mean KL per token: docs/kv-quant.md gives
// the measurement behind it.
inline constexpr double kDefaultKvQuantCheckThreshold = 1e-2;

struct KvQuantCheckLayer {
  int32_t layer_idx = 0;
  double output_kl = 0.0;   // mean KL of the output with only this layer quantized (decides)
  double attn_error = 0.0;  // relative L2 of the layer's attention output (diagnostic)
  bool kept = false;        // output_kl > threshold: the layer stays at model precision
};

struct KvQuantCheckReport {
  DType dtype = DType::kF32;  // the quantized dtype checked
  double threshold = kDefaultKvQuantCheckThreshold;
  int32_t num_tokens = 0;  // calibration tokens
  std::vector<KvQuantCheckLayer> layers;

  std::vector<int32_t> kept_layers() const;
};

// The check's progress: called after each of its forward passes with the pass just done (1 ..
// passes) and their number (num_layers + 2). A model's check at start-up is num_layers + 2 full
// forward passes of the calibration prompt on the CPU: minutes for a large model.
using KvQuantCheckProgress = std::function<void(int32_t pass, int32_t passes)>;

}  // namespace strata

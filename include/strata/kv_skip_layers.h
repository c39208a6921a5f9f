#pragma once
// KvSkipLayers: the layers of a quantized KV cache that keep model precision
// (--kv-cache-dtype-skip-layers, EngineConfig::kv_skip_layers; docs/kv-quant.md, "Per-layer
// exceptions"). Parsed and checked against the model by the engine (src/kv/kv_layer_dtypes.h).

#include <cstdint>
#include <vector>

namespace strata {

// Empty = no exceptions.
struct KvSkipLayers {
  bool sliding_window = false;  // every layer with a sliding window (layer_sliding_window > 0)
  std::vector<int32_t> layers;  // 0-based, distinct, in the order given

  bool empty() const { return !sliding_window && layers.empty(); }
};

}  // namespace strata

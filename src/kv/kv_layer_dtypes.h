#pragma once
// Per-layer KV element types: which layers of a quantized cache keep model precision
// (docs/kv-quant.md, "Per-layer exceptions"). --kv-cache-dtype-skip-layers names them by index or
// as `sliding_window` (every layer the model gives a sliding window, vLLM's spelling);
// --kv-quant-check (engine/kv_quant_check.h) adds the layers whose measured error is too large.
// The result is a KvSpec::layer_dtypes array (kv_layout.h lays it out). KvSkipLayers, the
// parsed flag, is the public API's (strata/kv_skip_layers.h).
//
// Plain data and arithmetic; the text form is parsed once, by the CLI (tools/strata/
// kv_cache_options.cc), with the model-independent checks (garbage, duplicates) there and the
// range check here, where the number of layers is known.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "strata/kv_skip_layers.h"

namespace strata::kv {

// "sliding_window", "0,5", "sliding_window,3" (items separated by commas, spaces around them
// ignored; "" = none). InvalidArgument, one line naming the bad item, for anything that is not a
// non-negative decimal index or sliding_window, for an empty item and for a layer named twice.
Result<KvSkipLayers> parse_kv_skip_layers(std::string_view text);

// The text form back ("sliding_window,0,5"; "" when empty), for logs and JSON.
std::string kv_skip_layers_text(const KvSkipLayers& skip);

// Which layers skip names, for a model whose per-layer windows are layer_windows (0 = full
// attention; its size is the number of layers): mask[l] true for a skipped layer.
// InvalidArgument for an index >= the number of layers.
Result<std::vector<bool>> kv_skip_layer_mask(const KvSkipLayers& skip,
                                             std::span<const int32_t> layer_windows);

// Per-layer dtypes: `dtype` everywhere, `full_precision` where mask is set. Empty when no layer
// is set (the uniform layout), so a uniform cache keeps KvSpec::layer_dtypes empty.
std::vector<DType> kv_layer_dtypes(DType dtype, DType full_precision,
                                   const std::vector<bool>& mask);

// For logs: "int8", or with exceptions "int8 (layers 0,5 float32)" -- the cache dtype name of
// dtype, then each other dtype among layer_dtypes with the layers that hold it.
std::string kv_dtype_summary(DType dtype, std::span<const DType> layer_dtypes);

}  // namespace strata::kv

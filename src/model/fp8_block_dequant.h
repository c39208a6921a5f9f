#pragma once
// Block-scaled FP8 checkpoints (DeepSeek-V3's quantization_config quant_method "fp8";
// model_fp8.cc): what the CPU engine and the GPU runner both do at load.

#include <cstdint>
#include <deque>
#include <vector>

#include "model/hf_config.h"
#include "model/llama_family.h"
#include "model/weight_store.h"

namespace strata::model {

// For quant_method "fp8": every F8_E4M3 weight view of `weights` (bound from `store`) is
// dequantized with its weight_scale_inv blocks into BF16 appended to `owned` (the product in
// fp32, rounded once), and the view repointed there. Does nothing for other configs. Throws
// strata::Error for a weight without its scales or one that is not a whole 2-D tensor.
void dequantize_block_fp8(const ModelConfig& config, const WeightStore& store,
                          DecoderWeights& weights, std::deque<std::vector<uint16_t>>& owned);

}  // namespace strata::model

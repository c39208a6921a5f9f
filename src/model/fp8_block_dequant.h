#pragma once
// FP8 checkpoints (model_fp8.cc): DeepSeek-V3's block-scaled weights (quant_method "fp8"), and
// compressed-tensors' and FBGEMM's with a scale per output channel or per tensor: what the CPU
// engine and the GPU runner both do at load.

#include <cstdint>
#include <deque>
#include <vector>

#include "model/hf_config.h"
#include "model/llama_family.h"
#include "model/weight_store.h"

namespace strata::model {

// For a loadable quant_method: every F8_E4M3 weight view of `weights` (bound from `store`) is
// dequantized with its scales (weight_scale_inv blocks, or weight_scale per row or tensor) into
// BF16 appended to `owned` (the product in fp32, rounded once), and the view repointed there.
// Does nothing without quantization. Throws strata::Error for a weight without its scales, with
// scales of another shape, or one that is not a whole 2-D tensor.
void dequantize_block_fp8(const ModelConfig& config, const WeightStore& store,
                          DecoderWeights& weights, std::deque<std::vector<uint16_t>>& owned);

}  // namespace strata::model

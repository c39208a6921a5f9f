#pragma once
// Rotary-embedding frequencies for each RoPE type a config can name, as Hugging Face computes
// them (transformers' rope initialisation functions): one inverse frequency per channel pair.

#include <cstdint>
#include <vector>

#include "model/hf_config.h"

namespace strata::model {

// inv_freq[i] for i in [0, head_dim / 2): theta^(-2i / head_dim), then scaled per rope.type:
//   kDefault  unchanged
//   kLinear   divided by factor (HF scales positions by 1/factor: the same angles)
//   kLlama3   wavelengths longer than original_max / low_freq_factor divided by factor, shorter
//             than original_max / high_freq_factor unchanged, and a smooth blend in between.
// Computed in fp32 like transformers, whose rotary layer keeps fp32 angles even in a float64 model.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

}  // namespace strata::model

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
//   kYarn     a linear ramp over channel pairs between the extrapolated (theta^(-2i/d)) and the
//             interpolated (/ factor) frequency, its ends where beta_fast and beta_slow rotations
//             fit in original_max positions (floored / ceiled unless truncate is false).
// Computed in fp32 like transformers, whose rotary layer keeps fp32 angles even in a float64 model.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

// The factor cos and sin are multiplied by (transformers' attention_scaling): 1 except for
// kYarn, whose attention_factor is given, or get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) when both are, else get_mscale(factor) = 0.1 ln(factor) + 1.
double rope_attention_factor(const RopeConfig& rope);

}  // namespace strata::model

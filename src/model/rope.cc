#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

namespace strata::model {
namespace {

void apply_llama3(const RopeConfig& rope, std::vector<float>& inv_freq) {
  const double old_context = static_cast<double>(rope.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / rope.low_freq_factor;
  const double high_freq_wavelen = old_context / rope.high_freq_factor;
  for (float& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = static_cast<float>(f / rope.factor);
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (old_context / wavelen - rope.low_freq_factor) /
                            (rope.high_freq_factor - rope.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / rope.factor + smooth * f);
    }
  }
}

double yarn_get_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// The pair index at which num_rotations full turns fit in original_max positions.
double yarn_correction_dim(double num_rotations, double dim, double base, double original_max) {
  return dim * std::log(original_max / (num_rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(base));
}

// transformers computes the ramp and the blend in fp32 tensors; so does this.
void apply_yarn(const RopeConfig& rope, int64_t head_dim, std::vector<float>& inv_freq) {
  const auto dim = static_cast<double>(head_dim);
  const auto original = static_cast<double>(rope.original_max_position_embeddings);
  double low = yarn_correction_dim(rope.beta_fast, dim, rope.theta, original);
  double high = yarn_correction_dim(rope.beta_slow, dim, rope.theta, original);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  const auto lo = static_cast<float>(low), span = static_cast<float>(high - low);
  const auto factor = static_cast<float>(rope.factor);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    const float pos_freq = std::pow(static_cast<float>(rope.theta),
                                    static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolated = 1.0f / pos_freq;
    const float interpolated = 1.0f / (factor * pos_freq);
    inv_freq[i] = interpolated * (1.0f - extrapolation) + extrapolated * extrapolation;
  }
}

}  // namespace

double rope_attention_factor(const RopeConfig& rope) {
  if (rope.type != RopeConfig::Type::kYarn) return 1.0;
  if (rope.attention_factor > 0.0) return rope.attention_factor;
  if (rope.mscale > 0.0 && rope.mscale_all_dim > 0.0) {
    return yarn_get_mscale(rope.factor, rope.mscale) /
           yarn_get_mscale(rope.factor, rope.mscale_all_dim);
  }
  return yarn_get_mscale(rope.factor, 1.0);
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  STRATA_CHECK(head_dim > 0 && head_dim % 2 == 0, "RoPE needs an even head_dim");
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  const auto base = static_cast<float>(rope.theta);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, exponent);
  }
  switch (rope.type) {
    case RopeConfig::Type::kDefault:
      break;
    case RopeConfig::Type::kLinear:
      for (float& f : inv_freq) f = static_cast<float>(f / rope.factor);
      break;
    case RopeConfig::Type::kLlama3:
      apply_llama3(rope, inv_freq);
      break;
    case RopeConfig::Type::kYarn:
      apply_yarn(rope, head_dim, inv_freq);
      break;
  }
  return inv_freq;
}

}  // namespace strata::model

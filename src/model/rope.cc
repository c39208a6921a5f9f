#include "model/rope.h"

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

}  // namespace

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
  }
  return inv_freq;
}

}  // namespace strata::model

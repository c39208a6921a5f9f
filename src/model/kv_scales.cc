#include "model/kv_scales.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/tensor_view.h"

namespace strata::model {
namespace {

struct LayerScales {
  std::optional<float> k;
  std::optional<float> v;
};

float read_scalar(const WeightStore& w, const std::string& name) {
  const TensorView t = w.get(name);
  if (t.numel() != 1) {
    throw Error("tensor '" + name + "' must be a scalar KV scale (it has " +
                std::to_string(t.numel()) + " elements) (" + w.source() + ")");
  }
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
    throw Error("tensor '" + name + "' must be F32, BF16 or F16, not " +
                std::string(dtype_name(t.dtype)) + " (" + w.source() + ")");
  }
  const float value = load_as_f32(t.data, t.dtype, 0);
  if (!std::isfinite(value) || value <= 0.0f) {
    throw Error("tensor '" + name + "' is not a finite positive KV scale (" +
                std::to_string(value) + ") (" + w.source() + ")");
  }
  return value;
}

LayerScales layer_scales(const WeightStore& w, int32_t layer) {
  const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
  const std::pair<const char*, const char*> pairs[] = {
      {"k_scale", "v_scale"}, {"k_proj.output_scale", "v_proj.output_scale"}};
  LayerScales s;
  for (const auto& [k, v] : pairs) {
    if (w.contains(prefix + k) || w.contains(prefix + v)) {
      if (w.contains(prefix + k)) s.k = read_scalar(w, prefix + k);
      if (w.contains(prefix + v)) s.v = read_scalar(w, prefix + v);
      return s;
    }
  }
  if (w.contains(prefix + "kv_scale")) s.k = s.v = read_scalar(w, prefix + "kv_scale");
  return s;
}

}  // namespace

std::optional<kv::KvStaticScales> read_checkpoint_kv_scales(const WeightStore& weights,
                                                            int32_t num_layers) {
  kv::KvStaticScales scales;
  int32_t found = 0;
  std::vector<LayerScales> layers;
  for (int32_t l = 0; l < num_layers; ++l) {
    layers.push_back(layer_scales(weights, l));
    found += layers.back().k || layers.back().v ? 1 : 0;
  }
  if (found == 0) return std::nullopt;
  for (int32_t l = 0; l < num_layers; ++l) {
    const LayerScales& s = layers[static_cast<size_t>(l)];
    if (!s.k || !s.v) {
      throw Error("the checkpoint has KV cache scales for some layers but not layer " +
                  std::to_string(l) + " (" + (s.k ? "v_scale" : "k_scale") + " missing) (" +
                  weights.source() + ")");
    }
    scales.k.push_back(*s.k);
    scales.v.push_back(*s.v);
  }
  return scales;
}

kv::KvStaticScales kv_scales_from_abs_max(std::span<const std::pair<float, float>> abs_max,
                                          DType fp8_dtype) {
  STRATA_CHECK(fp8_dtype == DType::kF8E4M3 || fp8_dtype == DType::kF8E5M2,
               "kv_scales_from_abs_max: not an fp8 dtype");
  const float fp8_max = fp8_dtype == DType::kF8E4M3 ? kFp8E4M3Max : kFp8E5M2Max;
  const auto scale_of = [&](float m) {
    const float s = m / fp8_max;
    return std::isfinite(s) && s > 0.0f ? s : 1.0f;
  };
  kv::KvStaticScales scales;
  for (const auto& [k, v] : abs_max) {
    scales.k.push_back(scale_of(k));
    scales.v.push_back(scale_of(v));
  }
  return scales;
}

}  // namespace strata::model

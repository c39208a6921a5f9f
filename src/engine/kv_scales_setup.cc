#include "engine/kv_scales_setup.h"

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/kv_scales.h"
#include "tokenizer/tokenizer.h"

namespace strata::engine {
namespace {

// Plain prose of mixed register, numbers and code, so the activations resemble served text.
constexpr const char* kCalibrationText =
    "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11 landed on the Moon, and "
    "Neil Armstrong stepped onto the surface six hours later. A paged KV cache stores each "
    "token's keys and values in fixed-size blocks, so that sequences of very different lengths "
    "can share one pool of memory without fragmentation. def fib(n):\n    return n if n < 2 "
    "else fib(n - 1) + fib(n - 2)\n\nQuestion: what is the capital of France? Answer: Paris, "
    "which lies on the Seine and has about two million inhabitants. Photosynthesis converts "
    "light, water and carbon dioxide into glucose and oxygen; mitochondria then release the "
    "stored energy. SELECT name, COUNT(*) FROM orders GROUP BY name ORDER BY 2 DESC LIMIT 10; "
    "Les feuilles mortes se ramassent a la pelle. 3.14159 x 2.71828 = 8.53973, roughly.";

bool is_fp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

}  // namespace

std::vector<int32_t> kv_calibration_tokens(const model::Model& model,
                                           const std::filesystem::path& model_dir) {
  return kv_calibration_tokens(model.vocab_size(), model_dir);
}

std::vector<int32_t> kv_calibration_tokens(int64_t vocab_size,
                                           const std::filesystem::path& model_dir) {
  if (!model_dir.empty() && file_exists(model_dir / "tokenizer.json")) {
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir);
    std::vector<int32_t> ids = tok.encode(kCalibrationText, /*add_special_tokens=*/true);
    const auto vocab = static_cast<int32_t>(vocab_size);
    std::erase_if(ids, [vocab](int32_t id) { return id < 0 || id >= vocab; });
    if (!ids.empty()) return ids;
  }
  std::vector<int32_t> ids(512);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int32_t& id : ids) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    id = static_cast<int32_t>(x % static_cast<uint64_t>(vocab_size));
  }
  return ids;
}

Result<ResolvedKvScales> resolve_kv_scales(const KvScalesOptions& o, model::Model& model,
                                           ThreadPool& pool) {
  const auto num_layers = static_cast<int32_t>(model.config().num_hidden_layers);
  KvScalesSources sources;
  sources.num_layers = num_layers;
  sources.vocab_size = model.vocab_size();
  sources.abs_max = [&](std::span<const int32_t> tokens) { return model.kv_abs_max(tokens, pool); };
  sources.checkpoint = [&] { return model::read_checkpoint_kv_scales(model.weights(), num_layers); };
  return resolve_kv_scales(o, sources);
}

Result<ResolvedKvScales> resolve_kv_scales(const KvScalesOptions& o,
                                           const KvScalesSources& sources) {
  ResolvedKvScales r;
  if (!is_fp8(o.kv_dtype)) {
    r.source = "none (not fp8)";
    return r;
  }
  const int32_t num_layers = sources.num_layers;
  try {
    if (o.calculate_kv_scales) {
      const std::vector<int32_t> tokens = kv_calibration_tokens(sources.vocab_size, o.model_dir);
      auto abs_max = sources.abs_max(tokens);
      if (!abs_max.ok()) return abs_max.status();
      r.scales = model::kv_scales_from_abs_max(abs_max.value(), o.kv_dtype);
      r.source = "calculated over " + std::to_string(tokens.size()) + " calibration tokens";
      return r;
    }
    if (auto from_checkpoint = sources.checkpoint()) {
      r.scales = std::move(*from_checkpoint);
      r.source = "checkpoint k_scale/v_scale";
      return r;
    }
  } catch (const Error& e) {
    return Status::InvalidArgument(e.what());
  }
  if (o.allow_unit_kv_scales) {
    r.scales.k.assign(static_cast<size_t>(num_layers), 1.0f);
    r.scales.v.assign(static_cast<size_t>(num_layers), 1.0f);
    r.source = "1.0 (--allow-unit-kv-scales)";
    return r;
  }
  return Status::InvalidArgument(
      "--kv-cache-dtype " + std::string(o.kv_dtype == DType::kF8E4M3 ? "fp8_e4m3" : "fp8_e5m2") +
      " needs per-layer KV scales, and the checkpoint has no k_scale/v_scale (or kv_scale) "
      "tensors: pass --calculate-kv-scales to compute them at start-up, use a calibrated "
      "checkpoint, or --allow-unit-kv-scales to use 1.0 (may lose accuracy)");
}

}  // namespace strata::engine

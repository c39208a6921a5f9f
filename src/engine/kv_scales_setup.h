#pragma once
// Where an FP8 KV cache's per-layer static scales come from (docs/kv-quant.md), decided once at
// start-up by the engine:
//   1. --calculate-kv-scales: max |k| and max |v| per layer over one forward pass of a fixed
//      calibration text (through model_dir's tokenizer.json; a fixed pseudo-random prompt when
//      there is none), divided by the format's largest finite value;
//   2. else the checkpoint's k_scale / v_scale (or kv_scale) tensors (model/kv_scales.h);
//   3. else 1.0 for every layer, only with --allow-unit-kv-scales (vLLM's silent default);
//   4. else an InvalidArgument naming the three fixes. A silent 1.0 would clip every |x| > 448
//      (e4m3) and lose precision below 2^-6 without a word.
// Other KV dtypes take no static scales (empty result).

#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace strata::engine {

struct KvScalesOptions {
  DType kv_dtype = DType::kF32;
  bool calculate_kv_scales = false;
  bool allow_unit_kv_scales = false;
  std::filesystem::path model_dir;  // for tokenizer.json (calibration); may be empty
};

struct ResolvedKvScales {
  kv::KvStaticScales scales;  // empty unless kv_dtype is F8E4M3 / F8E5M2
  std::string source;  // for the start-up line: "checkpoint", "calculated over N tokens", ...
};

// Where a backend gets the two measured sources from.
struct KvScalesSources {
  int32_t num_layers = 0;
  int64_t vocab_size = 0;
  // Per-layer (max |k|, max |v|) over one forward pass of the calibration tokens.
  std::function<Result<std::vector<std::pair<float, float>>>(std::span<const int32_t>)> abs_max;
  // The checkpoint's scales (model/kv_scales.h), nullopt when it has none; may throw Error.
  std::function<std::optional<kv::KvStaticScales>()> checkpoint;
};

// Runs the calibration forward pass when asked (the model's scratch, not its serving pool).
// Throws nothing: bad checkpoint scales and a refused configuration come back as InvalidArgument.
Result<ResolvedKvScales> resolve_kv_scales(const KvScalesOptions& options, model::Model& model,
                                           ThreadPool& pool);
// The same order of sources for any backend (the GPU runner calibrates on the device).
Result<ResolvedKvScales> resolve_kv_scales(const KvScalesOptions& options,
                                           const KvScalesSources& sources);

// The calibration prompt's token ids for model (exposed for tests): kCalibrationText through
// model_dir's tokenizer.json, or 512 fixed pseudo-random ids below the vocabulary size.
std::vector<int32_t> kv_calibration_tokens(const model::Model& model,
                                           const std::filesystem::path& model_dir);
std::vector<int32_t> kv_calibration_tokens(int64_t vocab_size,
                                           const std::filesystem::path& model_dir);

}  // namespace strata::engine

#pragma once
// What an engine was built with, fixed once Engine::create returns: the model's shape
// (ModelInfo) and the KV cache's layout and size (KvCacheInfo) -- what start-up prints, the
// server advertises and /metrics reports.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/dtype.h"
#include "strata/kv_quant_check_report.h"

namespace strata {

struct ModelInfo {
  std::string architecture;  // "llama", "qwen2", "qwen3", "mistral", ...
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int32_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t weight_bytes = 0;  // all weights, as the device holds them (FP8 included)
};

struct KvCacheInfo {
  // The pool's element type: EngineConfig::kv_cache_dtype resolved (auto is the device's
  // precision), and each layer's, which differs from it only at the per-layer exceptions.
  DType dtype = DType::kF32;
  std::vector<DType> layer_dtypes;
  // Bytes per token of the pool (all layers, K and V), of which per-token scales (I8); INT4's
  // per-block statistics make the figure a block-size average, rounded.
  int64_t bytes_per_token = 0;
  int64_t scale_bytes_per_token = 0;
  int32_t num_blocks = 0;  // group 0's pool, the null block included
  // The most tokens (prompt + max_tokens) one request can have: max_model_len, or less when the
  // pool cannot hold that many for one sequence. What the server advertises as max_model_len.
  int64_t max_request_tokens = 0;
  // FP8: where the static scales came from ("checkpoint k_scale/v_scale", "calculated over N
  // calibration tokens", "1.0 (--allow-unit-kv-scales)"); empty for other dtypes.
  std::string scales_source;
  std::optional<KvQuantCheckReport> quant_check;  // when --kv-quant-check ran
};

// EngineConfig::warm_up's request as it ran before Engine::create returned; zeros where none ran
// (kOff, or kAuto on the CPU).
struct WarmUpInfo {
  int64_t prompt_tokens = 0;
  int32_t steps = 0;
  double seconds = 0.0;
};

}  // namespace strata

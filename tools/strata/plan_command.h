#pragma once
// `strata plan`: what fits. From a model's config.json (and its weights' size), the KV dtype, the
// block size and the memory budget, prints KV bytes per token (per layer, scales included) beside
// the naive full-MHA figure, the pool's capacity in blocks and tokens after the weights, how many
// sequences of max_model_len fit at once, and the longest context one sequence can have -- what
// the engine will really do: the arithmetic is kv::compute_plan (kv/capacity_plan.h), sized by
// the same rule as the engine's pools. This file parses the checkpoint's config (also of
// architectures the engine cannot load yet: MLA, DeepSeek's MoE) and prints the report; an MoE
// model's weight bytes count every expert, since all of them stay resident.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/capacity_plan.h"

namespace CLI {
class App;
}

namespace strata::cli {

using kv::compute_plan;
using kv::device_precision;
using kv::plan_device_name;
using kv::PlanDevice;
using kv::PlanGroup;
using kv::PlanModel;
using kv::PlanReport;
using kv::PlanSettings;

struct PlanOptions {
  std::string model_dir;    // --model DIR (config.json + *.safetensors)
  std::string config_file;  // --config FILE (weights estimated from the config)
  std::string kv_cache_dtype = "auto";
  std::string kv_cache_dtype_skip_layers;  // layers kept at auto's dtype
  int32_t block_size = 16;
  std::string device = "cuda";       // cuda or cpu
  std::string gpu_memory = "80GiB";  // bytes, or with a K/M/G/T (1000) or Ki/Mi/Gi/Ti suffix
  std::optional<double> gpu_memory_utilization;  // default 0.9
  std::string kv_cache_memory_bytes;             // overrides the utilization budget
  int64_t max_model_len = 0;                     // 0 = the model's max_position_embeddings
  // The scheduler limits and R that size int4's residual pool; the engine's defaults.
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t kv_int4_residual = 0;  // tokens; 0 = one block
  bool disable_hybrid_kv_cache_manager = false;
  bool json = false;
};

// Parses config.json text (throws strata::Error naming source and key). Weight bytes are
// estimated from the shapes (dense, MoE and MLA projections).
PlanModel parse_plan_model(std::string_view json_text, std::string_view source);

std::string format_plan_text(const PlanReport& report);
std::string format_plan_json(const PlanReport& report);

// "80GiB", "141e9", "1.5T", "4096": bytes. nullopt when malformed or negative.
std::optional<int64_t> parse_byte_size(std::string_view text);

void add_plan_command(CLI::App& app, PlanOptions& options);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_plan(const PlanOptions& options);

}  // namespace strata::cli

#pragma once
// `strata plan`: what fits. From a model's config.json (and its weights' size), the KV dtype, the
// block size and the memory budget, prints KV bytes per token (per layer, scales included) beside
// the naive full-MHA figure, the pool's capacity in blocks and tokens after the weights, how many
// sequences of max_model_len fit at once, and the longest context one sequence can have -- what
// the engine will really do (window-capped for all-sliding-window models; full length, with a
// note, for hybrid ones). With an int4 layer, the engine's full-precision residual pool (bf16
// blocks for --device cuda, float32 for --device cpu, sized from --max-num-seqs,
// --max-num-batched-tokens and --kv-int4-residual as the engine sizes it) comes out of the KV
// memory first. Impossible settings are a strata::Error naming the fix.
//
// The arithmetic (compute_plan) is separate from the CLI so tests check it against hand-computed
// figures.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"

namespace CLI {
class App;
}

namespace strata::cli {

// The engine a plan sizes (--device): the GPU's or the CPU's. Only int4's residual pool differs:
// it holds each backend's full precision (kv::residual_spec), bf16 on the GPU, float32 on the CPU.
enum class PlanDevice { kCuda, kCpu };
const char* plan_device_name(PlanDevice device);  // "cuda", "cpu"
kv::KvCacheDType residual_pool_dtype(PlanDevice device);

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
  bool json = false;
};

// What plan needs from a model.
struct PlanModel {
  std::string name;  // the path it came from
  std::string model_type;
  bool engine_supported = false;  // the engine's loader accepts the architecture
  kv::KvShape kv;
  int32_t num_attention_heads = 0;
  int32_t mha_head_dim_k = 0;  // per-head K and V widths of the naive full-MHA cache
  int32_t mha_head_dim_v = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int32_t> layer_windows;  // per layer, 0 = full attention
  int32_t weight_bits = 16;            // stored weight element size (auto KV dtype follows it)
  int64_t weight_bytes = 0;
  bool weight_bytes_estimated = true;  // from the config's shapes, not from files
};

// Parses config.json text (throws strata::Error naming source and key). Weight bytes are
// estimated from the shapes (dense, MoE and MLA projections).
PlanModel parse_plan_model(std::string_view json_text, std::string_view source);

struct PlanSettings {
  kv::KvCacheDType kv_dtype = kv::KvCacheDType::kBF16;
  // --kv-cache-dtype-skip-layers: these layers hold model_dtype (what auto picks) instead.
  kv::KvSkipLayers skip_layers;
  kv::KvCacheDType model_dtype = kv::KvCacheDType::kBF16;
  int32_t block_size = 16;
  PlanDevice device = PlanDevice::kCuda;
  int64_t gpu_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  std::optional<int64_t> kv_cache_memory_bytes;
  int64_t max_model_len = 0;  // 0 = model's
  // int4's residual pool (the engine's EngineConfig fields of the same names and defaults).
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t kv_int4_residual = 0;  // tokens, a multiple of block_size; 0 = one block
};

struct PlanReport {
  PlanModel model;
  PlanSettings settings;
  double kv_bytes_per_token = 0;
  double kv_bytes_per_token_per_layer = 0;
  double scale_bytes_per_token = 0;
  std::vector<int32_t> skipped_layers;   // layers at settings.model_dtype (when it differs)
  double naive_mha_bytes_per_token = 0;  // every attention head's K and V, 16-bit
  int64_t block_bytes = 0;
  int64_t kv_pool_bytes = 0;  // all the KV memory, int4's residual pool included
  // Some layer int4: the engine's residual pool, null block included (kv::residual_pool_blocks),
  // of residual_pool_dtype(settings.device) blocks, subtracted from kv_pool_bytes before it is
  // divided into blocks. 0 otherwise.
  int64_t int4_residual_pool_blocks = 0;
  int64_t int4_residual_pool_bytes = 0;
  int64_t num_blocks = 0;       // allocatable (the null block not counted)
  int64_t capacity_tokens = 0;  // num_blocks x block_size
  int64_t naive_capacity_tokens = 0;
  int64_t max_model_len = 0;
  int32_t window = 0;          // > 0 when every layer uses this sliding window
  int64_t blocks_per_seq = 0;  // held by one sequence of max_model_len
  int64_t max_concurrent_seqs = 0;
  int64_t longest_context = 0;
  std::vector<std::string> notes;
};

// Throws strata::Error for impossible settings: weights larger than the budget, an int4 residual
// pool as large as the KV memory, a pool of zero blocks, one sequence of max_model_len not
// fitting, max_model_len beyond the model's, a skipped layer beyond the model's, a bad
// kv_int4_residual (not a positive multiple of the block size, or without int4) or scheduler
// limits below 1.
PlanReport compute_plan(const PlanModel& model, const PlanSettings& settings);

std::string format_plan_text(const PlanReport& report);
std::string format_plan_json(const PlanReport& report);

// "80GiB", "141e9", "1.5T", "4096": bytes. nullopt when malformed or negative.
std::optional<int64_t> parse_byte_size(std::string_view text);

void add_plan_command(CLI::App& app, PlanOptions& options);
// Returns the process exit code; throws strata::Error for bad files or options.
int run_plan(const PlanOptions& options);

}  // namespace strata::cli

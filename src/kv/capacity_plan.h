#pragma once
// The capacity plan (`strata plan`): what a model's KV cache costs per token and what a memory
// budget holds -- the pool's blocks and tokens after the weights, how many sequences of
// max_model_len fit at once, the longest context one sequence can have. The pools are sized by
// kv::plan_kv_groups and kv::memory_pool_blocks, the rule the engine builds its own pools with,
// so the plan and the engine agree block for block (window-capped for all-sliding-window models;
// a hybrid model's windowed layers in a limit-sized pool of their own on the CPU engine, every
// layer at full length on the GPU's; an INT4 cache's full-precision newest blocks taken from the
// KV memory first). Impossible settings are a strata::Error naming the fix.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"

namespace strata::kv {

// The engine a plan sizes (--device): the GPU's or the CPU's. They differ in their model
// precision and in hybrid models (only the CPU engine keeps windowed layers in a group of their
// own).
enum class PlanDevice { kCuda, kCpu };
const char* plan_device_name(PlanDevice device);  // "cuda", "cpu"
// The device's model precision, whatever the checkpoint stores: what --kv-cache-dtype auto holds,
// what skipped layers keep and what an INT4 cache's newest blocks hold (kv::newest_blocks_spec):
// bfloat16 on the GPU, float32 on the CPU.
KvCacheDType device_precision(PlanDevice device);

// What plan needs from a model.
struct PlanModel {
  std::string name;  // the path it came from
  std::string model_type;
  bool engine_supported = false;  // the engine's loader accepts the architecture
  bool cpu_only = false;          // only the CPU engine runs it (--device cuda refuses it)
  kv::KvShape kv;
  int32_t num_attention_heads = 0;
  int32_t mha_head_dim_k = 0;  // per-head K and V widths of the naive full-MHA cache
  int32_t mha_head_dim_v = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int32_t> layer_windows;  // per layer, 0 = full attention
  int32_t weight_bits = 16;            // stored weight element size (the weights' bytes)
  int64_t weight_bytes = 0;
  bool weight_bytes_estimated = true;  // from the config's shapes, not from files
};

struct PlanSettings {
  // kAuto: device_precision(device), as the engine resolves it.
  KvCacheDType kv_dtype = KvCacheDType::kAuto;
  // --kv-cache-dtype-skip-layers: these layers hold device_precision(device) instead.
  KvSkipLayers skip_layers;
  int32_t block_size = 16;
  PlanDevice device = PlanDevice::kCuda;
  int64_t gpu_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  std::optional<int64_t> kv_cache_memory_bytes;
  int64_t max_model_len = 0;  // 0 = model's
  // int4's newest-blocks group (the engine's EngineConfig fields of the same names and defaults).
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t kv_int4_residual = 0;  // tokens, a multiple of block_size; 0 = one block
  // The CPU engine keeps a hybrid model's windowed layers in a KV cache group of their own
  // unless this is set (--disable-hybrid-kv-cache-manager); the GPU engine does not yet.
  bool disable_hybrid_kv_cache_manager = false;
};

// A limit-sized pool of the plan.
struct PlanGroup {
  std::string kind;  // kv_group_kind_name: "sliding window", "newest blocks"
  int32_t num_layers = 0;
  int32_t window = 0;                        // sliding window: W
  int32_t newest_blocks = 0;                 // newest blocks: R
  KvCacheDType dtype = KvCacheDType::kBF16;  // its layers' dtype (the first layer's)
  int64_t num_blocks = 0;                    // the null block included
  int64_t block_bytes = 0;
  int64_t bytes = 0;
};

struct PlanReport {
  PlanModel model;
  PlanSettings settings;
  double kv_bytes_per_token = 0;
  double kv_bytes_per_token_per_layer = 0;
  double scale_bytes_per_token = 0;
  std::vector<int32_t> skipped_layers;   // layers at settings.model_dtype (when it differs)
  double naive_mha_bytes_per_token = 0;  // every attention head's K and V, 16-bit
  int64_t block_bytes = 0;               // group 0's (a hybrid model's full-attention layers only)
  int64_t kv_pool_bytes = 0;             // all the KV memory, int4's newest-blocks pool included
  // Some layer int4: the engine's newest-blocks pool, null block included
  // (newest_blocks_pool_size), of device_precision(settings.device) blocks, subtracted from
  // kv_pool_bytes before it is divided into blocks. 0 otherwise.
  int64_t int4_residual_pool_blocks = 0;
  int64_t int4_residual_pool_bytes = 0;
  // The limit-sized pools beside group 0 (an INT4 cache's newest blocks, a hybrid model's
  // windowed layers), taken from kv_pool_bytes first: kv::plan_kv_groups's.
  std::vector<PlanGroup> limit_sized_groups;
  int64_t num_blocks = 0;       // group 0's, allocatable (the null block not counted)
  int64_t capacity_tokens = 0;  // num_blocks x block_size
  int64_t naive_capacity_tokens = 0;
  int64_t max_model_len = 0;
  int32_t window = 0;          // > 0 when every layer uses this sliding window
  int64_t blocks_per_seq = 0;  // held by one sequence of max_model_len
  int64_t max_concurrent_seqs = 0;
  int64_t longest_context = 0;
  std::vector<std::string> notes;
};

// Throws strata::Error for impossible settings: weights larger than the budget, limit-sized pools
// as large as the KV memory, a pool of fewer than two blocks, one sequence of max_model_len not
// fitting, max_model_len beyond the model's, a skipped layer beyond the model's, a bad
// kv_int4_residual (not a positive multiple of the block size, or without int4) or scheduler
// limits below 1.
PlanReport compute_plan(const PlanModel& model, const PlanSettings& settings);

// How the plan's report and errors print quantities: "12.34 GiB"; a whole number without
// decimals, else two.
std::string format_gib(double bytes);
std::string format_number(double v);

}  // namespace strata::kv

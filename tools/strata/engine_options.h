#pragma once
// The engine flags `strata bench` and `strata serve` share (vLLM's names: --device,
// --gpu-memory-utilization, --block-size, --num-blocks, --kv-cache-memory-bytes, --max-num-seqs,
// --max-num-batched-tokens, --max-model-len, prefix caching, preemption, swap space, ...) and the
// EngineConfig they make; `strata generate` takes those that matter for one request. Each
// command's options struct derives from EngineOptions.

#include <cstdint>
#include <string>
#include <vector>

#include "kv_cache_options.h"
#include "kv_eviction_flags.h"
#include "strata/engine.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct EngineOptions {
  std::string model_dir;
  std::string tokenizer_dir;            // --tokenizer; empty = model_dir
  std::string load_format = "auto";     // auto (safetensors) or dummy
  bool mmap_weights = false;            // --mmap: serve weights from the mapped file
  std::string cpu_matmul_precision = "fp32";  // fp32 or bf16 (AVX-512 BF16)
  int32_t structured_output_max_states = 1 << 16;
  int32_t structured_output_max_grammar_depth = 6;
  int32_t structured_output_cache_size = 64;
  std::string dummy_dtype = "bfloat16";
  int32_t threads = 0;
  std::string device = "auto";          // auto, cpu or cuda
  double gpu_memory_utilization = 0.9;  // cuda: share of GPU memory for weights, activations, KV
  bool enforce_eager = false;           // cuda: no CUDA graphs
  bool warm_up = false;                 // --warm-up: on either device
  bool no_warm_up = false;              // --no-warm-up (neither: the GPU warms up)
  std::string quantization = "auto";    // auto, none or fp8 (cuda: FP8 weights)
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  int64_t kv_cache_memory_bytes = 0;    // 0: 1 GiB on the CPU, --gpu-memory-utilization on the GPU
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
  bool disable_hybrid_kv_cache_manager = false;
  std::string preemption_mode = "recompute";
  double swap_space_gib = 4.0;
  int64_t kv_offload_bytes = 0;  // KV tiers: host memory for evicted blocks (0 = off)
  std::string kv_disk_path;      // and the disk tier's directory
  int64_t kv_disk_bytes = 0;
  std::string kv_offload_policy = "evict";  // or write-through
  bool kv_prefetch = true;
  std::vector<std::string> kv_remote;   // redis://HOST[:PORT][/DB]: the remote tier (shards)
  bool kv_remote_cluster = false;       // kv_remote: a Redis Cluster's seed nodes
  int32_t kv_remote_timeout_ms = 200;
  int64_t kv_remote_ttl = 0;
  bool kv_remote_compress = false;
  std::string kv_remote_read = "auto";
  std::string cache_salt_secret_file;  // the tenant salts' key, the same on every instance
  std::string role = "both";           // --role: both, prefill or decode (disaggregation)
  std::string kv_peer_listen = "127.0.0.1:0";  // prefill: where decode instances read blocks
  std::vector<std::string> kv_peers;   // decode: each prefill instance's --kv-peer-listen
  int32_t kv_peer_wait_ms = 1000;
  int32_t kv_peer_timeout_ms = 2000;
  int64_t kv_peer_outbox_bytes = 0;
  bool kv_peer_compress = false;
  int64_t kv_peer_region_bytes = 0;  // prefill: a region decode instances on this machine map
  bool kv_peer_region = false;       // decode: copy blocks out of the prefill instance's region
  KvCacheOptions kv_cache;  // --kv-cache-dtype, --calculate-kv-scales, --allow-unit-kv-scales
  // Token eviction's defaults for requests (docs/kv-eviction.md): --kv-eviction-policy,
  // --kv-budget-tokens, --kv-sink-tokens, --kv-window-tokens (-1 / 0: the policy's own),
  // --kv-eviction-prefill-interval (0: automatic).
  std::string kv_eviction_policy = "none";
  int32_t kv_budget_tokens = 0;
  int32_t kv_sink_tokens = -1;
  int32_t kv_window_tokens = -1;
  std::string kv_snapkv_selection;  // empty: per_head
  std::string kv_pooling;           // empty: max
  int32_t kv_pool_kernel = -1;      // -1: 7
  int32_t kv_eviction_prefill_interval = 0;
  bool kv_compaction_copy_thread = false;  // --kv-compaction-copy-thread
};

// Which of the flags a command takes: all of them (bench, serve), or those that matter for one
// request (generate: no --num-blocks, --max-num-seqs, --preemption-mode, --swap-space, which keep
// their defaults; its CPU path sizes the pool for the request, so --kv-cache-memory-bytes is
// cuda-only there).
enum class EngineFlags { kServing, kOneRequest };

// Registers the shared flags (not --model, whose default differs per command).
void add_engine_options(CLI::App& cmd, EngineOptions& o, EngineFlags flags = EngineFlags::kServing);
// The engine configuration the flags describe (--device auto resolved here).
EngineConfig engine_config(const EngineOptions& o);
// F32, BF16 or F16 from a --dummy-dtype name; strata::Error otherwise.
DType parse_weight_dtype(const std::string& name);

}  // namespace strata::cli

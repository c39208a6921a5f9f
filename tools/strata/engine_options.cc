#include "engine_options.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace strata::cli {

DType parse_weight_dtype(const std::string& name) {
  if (name == "float32" || name == "f32") return DType::kF32;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "float16" || name == "f16") return DType::kF16;
  throw Error("--dummy-dtype '" + name + "' is not supported (use float32, bfloat16 or float16)");
}

void add_engine_options(CLI::App& cmd, EngineOptions& o, EngineFlags flags) {
  const bool serving = flags == EngineFlags::kServing;
  cmd.add_option("--load-format", o.load_format, "auto (safetensors) or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  cmd.add_flag("--mmap", o.mmap_weights,
               "cpu: read weights in place from the mapped safetensors files (4 KiB page-cache "
               "pages, nothing copied) instead of copying them into huge-page memory at start");
  cmd.add_option("--cpu-matmul-precision", o.cpu_matmul_precision,
                 "cpu: fp32 (exact, the default) or bf16: BF16 weights multiplied on the BF16 "
                 "dot-product instructions with activations rounded to BF16 (AVX-512 BF16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd.add_option("--dummy-dtype", o.dummy_dtype, "dummy weights' dtype: bfloat16, float16, float32");
  cmd.add_option("--threads", o.threads, "CPU worker threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--device", o.device, "auto (cuda when a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                 "cuda: share of GPU memory for weights, activations and the KV cache")
      ->check(CLI::Range(0.01, 1.0));
  cmd.add_flag("--enforce-eager", o.enforce_eager,
               "cuda: issue every launch each step instead of replaying CUDA graphs");
  CLI::Option* warm_up = cmd.add_flag(
      "--warm-up", o.warm_up,
      "Run one request of the largest prompt step at start and forget it, so that the first "
      "request does not pay the first forward pass's one-time costs (default on cuda only)");
  cmd.add_flag("--no-warm-up", o.no_warm_up, "No warm-up request at start, on cuda either")
      ->excludes(warm_up);
  cmd.add_option("--quantization", o.quantization,
                 "auto, none, or fp8: the decoder's linear layers in FP8 E4M3 with per-channel "
                 "scales computed at load (cuda only); auto is fp8 on cuda for a checkpoint of FP8 "
                 "weights scaled per channel or per tensor, none otherwise")
      ->check(CLI::IsMember({"auto", "none", "fp8"}));
  if (serving) {
    cmd.add_option("--tokenizer", o.tokenizer_dir,
                   "Directory with tokenizer.json, when --model has none (default: --model)")
        ->check(CLI::ExistingDirectory);
    cmd.add_option("--structured-output-max-states", o.structured_output_max_states,
                   "Refuse a response_format / guided_* constraint whose automaton would have "
                   "more states")
        ->check(CLI::Range(2, 1 << 24));
    cmd.add_option("--structured-output-max-grammar-depth",
                   o.structured_output_max_grammar_depth,
                   "Expand a guided_grammar's nesting to at most this depth: the deepest that "
                   "fits --structured-output-max-states (deeper nesting cannot be generated)")
        ->check(CLI::Range(0, 64));
    cmd.add_option("--structured-output-cache-size", o.structured_output_cache_size,
                   "Compiled structured-output constraints kept")
        ->check(CLI::Range(1, 1 << 16));
  }
  cmd.add_option("--block-size", o.block_size, "KV cache block size in tokens")
      ->check(CLI::IsMember({8, 16, 32, 64, 128}));
  if (serving) {
    cmd.add_option("--num-blocks", o.num_blocks, "KV pool size in blocks (overrides the bytes)")
        ->check(CLI::Range(0, 1 << 30));
  }
  cmd.add_option("--kv-cache-memory-bytes", o.kv_cache_memory_bytes,
                 serving ? "KV pool size in bytes (default: 1 GiB on the CPU; on the GPU what "
                           "--gpu-memory-utilization leaves)"
                         : "cuda: KV pool size in bytes (default: what --gpu-memory-utilization "
                           "leaves; the CPU sizes the pool for the request)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  if (serving) {
    cmd.add_option("--max-num-seqs", o.max_num_seqs, "Most sequences in one step")
        ->check(CLI::Range(1, 1 << 16));
  }
  cmd.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "Most tokens in one step")
      ->check(CLI::Range(1, 1 << 24));
  cmd.add_option("--max-model-len", o.max_model_len, "Longest prompt + output (0 = model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd.add_option("--kv-eviction-policy", o.kv_eviction_policy,
                 "Token eviction for requests that name none: none, streaming_llm (sink + newest "
                 "blocks) or paged_eviction (lowest ||V||/||K|| blocks first), which take whole "
                 "blocks, or h2o (lowest accumulated attention first) or snapkv (once, at the "
                 "prompt's end, by the attention of its last tokens), which take single tokens "
                 "and compact; once a sequence holds more than --kv-budget-tokens (the GPU engine "
                 "runs streaming_llm only)")
      ->check(CLI::IsMember({"none", "streaming_llm", "paged_eviction", "h2o", "snapkv"}));
  cmd.add_option("--kv-budget-tokens", o.kv_budget_tokens,
                 "Token eviction: the most KV slots a sequence holds between steps (0 = none "
                 "by default: requests name theirs)")
      ->check(CLI::Range(0, KvEvictionParams::kMaxTokens));
  cmd.add_option("--kv-sink-tokens", o.kv_sink_tokens,
                 "Token eviction: leading positions never evicted (default: 4 for "
                 "streaming_llm, 0 for the others)")
      ->check(CLI::Range(0, KvEvictionParams::kMaxTokens));
  cmd.add_option("--kv-window-tokens", o.kv_window_tokens,
                 "Token eviction: newest positions never evicted (default: the budget less the "
                 "sink for streaming_llm, 0 for paged_eviction, half the budget for h2o; for "
                 "snapkv the prompt's observation window, min(32, budget / 2))")
      ->check(CLI::Range(0, KvEvictionParams::kMaxTokens));
  cmd.add_option("--kv-snapkv-selection", o.kv_snapkv_selection,
                 "snapkv: per_head (each layer and KV head keeps its own tokens, the default) or "
                 "shared (one set of tokens for all)")
      ->check(CLI::IsMember({"per_head", "shared"}));
  cmd.add_option("--kv-pooling", o.kv_pooling,
                 "snapkv: max (the default) or avg pooling of the window's attention")
      ->check(CLI::IsMember({"max", "avg"}));
  cmd.add_option("--kv-pool-kernel", o.kv_pool_kernel,
                 "snapkv: the pooling kernel over neighbouring positions, odd (default 7)")
      ->check(CLI::Range(1, KvEvictionParams::kMaxPoolKernel));
  cmd.add_option("--kv-eviction-prefill-interval", o.kv_eviction_prefill_interval,
                 "Token eviction: while a prompt is computed the policy runs every this many "
                 "tokens, a multiple of the block size (0 = automatic: a block on the CPU, 512 "
                 "on the GPU)")
      ->check(CLI::Range(0, KvEvictionParams::kMaxTokens));
  cmd.add_flag("--kv-compaction-copy-thread", o.kv_compaction_copy_thread,
               "Token eviction: run compaction's copies on a copy thread beside the end of the "
               "step instead of on the step thread (the same results)");
  cmd.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
               "Reuse the KV of cached prompt prefixes (on by default)");
  cmd.add_flag("--disable-hybrid-kv-cache-manager", o.disable_hybrid_kv_cache_manager,
               "Keep a model's windowed layers' KV in the full layers' pool (no window group)");
  if (serving) {
    cmd.add_option("--preemption-mode", o.preemption_mode, "recompute or swap")
        ->check(CLI::IsMember({"recompute", "swap"}));
    cmd.add_option("--swap-space", o.swap_space_gib, "Host memory for swapped blocks, GiB")
        ->check(CLI::Range(0.0, 1e6));
    cmd.add_option("--kv-offload-bytes", o.kv_offload_bytes,
                   "KV tiers: host memory in bytes for blocks the pool evicts (0 = off)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
    cmd.add_option("--kv-disk-path", o.kv_disk_path,
                   "KV tiers: a directory for blocks the host tier drops (kept across restarts)");
    cmd.add_option("--kv-disk-bytes", o.kv_disk_bytes, "KV tiers: the disk tier's size in bytes")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 52));
    cmd.add_option("--kv-offload-policy", o.kv_offload_policy,
                   "KV tiers: evict (a block goes to host memory when the pool evicts it) or "
                   "write-through (as soon as it is cached)")
        ->check(CLI::IsMember({"evict", "write-through"}));
    cmd.add_flag("--kv-prefetch,!--no-kv-prefetch", o.kv_prefetch,
                 "KV tiers: load a queued request's prefix from disk while it waits (on by "
                 "default)");
    cmd.add_option("--kv-remote", o.kv_remote,
                   "KV tiers: a Redis server under the host tier, shared by the instances that "
                   "name it (redis://HOST[:PORT][/DB]); repeated, independent servers each "
                   "holding a share of the blocks (every instance naming the same servers the "
                   "same way); with --kv-remote-cluster, a Redis Cluster's seed nodes");
    cmd.add_flag("--kv-remote-cluster", o.kv_remote_cluster,
                 "KV tiers: --kv-remote names a Redis Cluster's seed nodes");
    cmd.add_option("--kv-remote-timeout-ms", o.kv_remote_timeout_ms,
                   "KV tiers: the longest wait for Redis per call (then recompute)")
        ->check(CLI::Range(1, 60000));
    cmd.add_option("--kv-remote-ttl", o.kv_remote_ttl,
                   "KV tiers: seconds a block lives in Redis (0 = until Redis evicts it)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
    cmd.add_flag("--kv-remote-compress,!--no-kv-remote-compress", o.kv_remote_compress,
                 "KV tiers: compress Redis values losslessly as suits the KV dtype (BF16: "
                 "split exponent codes; F16, FP8: zstd): for a Redis slower than a core's "
                 "coding (default: off)");
    cmd.add_option("--kv-remote-read", o.kv_remote_read,
                   "KV tiers: auto (read from Redis only what arrives before this instance "
                   "would compute it) or always (read every missing block and wait for it)")
        ->check(CLI::IsMember({"auto", "always"}));
    cmd.add_option("--role", o.role,
                   "Disaggregated serving: both (prefill and decode here), prefill (keep the "
                   "blocks computed for decode instances to read) or decode (read the blocks a "
                   "prompt lacks from the prefill instance at --kv-peer); prefill and decode "
                   "need --kv-offload-bytes")
        ->check(CLI::IsMember({"both", "prefill", "decode"}));
    cmd.add_option("--kv-peer-listen", o.kv_peer_listen,
                   "--role prefill: HOST:PORT where decode instances read its blocks (UCX; port "
                   "0 for any free one, printed at start)");
    cmd.add_option("--kv-peer", o.kv_peers,
                   "--role decode: the prefill instance's --kv-peer-listen address (repeated, "
                   "one per --prefill-url, in the same order)");
    cmd.add_option("--kv-peer-wait-ms", o.kv_peer_wait_ms,
                   "--role decode: how long a block the prefill instance has not written yet "
                   "is asked for again after the prefill call ends (then computed here)")
        ->check(CLI::Range(0, 600000));
    cmd.add_option("--kv-peer-timeout-ms", o.kv_peer_timeout_ms,
                   "--role decode: the longest wait for one round trip to the prefill instance")
        ->check(CLI::Range(1, 600000));
    cmd.add_option("--kv-peer-outbox-bytes", o.kv_peer_outbox_bytes,
                   "--role prefill: bytes of blocks kept for decode instances (0 = as many as "
                   "--kv-offload-bytes)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
    cmd.add_option("--kv-peer-region-bytes", o.kv_peer_region_bytes,
                   "--role prefill: also copy every block into a region of this many bytes that "
                   "decode instances on this machine map (GPU: CUDA IPC device memory on top "
                   "of the pool; CPU: shared memory); 0 = none (default)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
    cmd.add_flag("--kv-peer-region,!--no-kv-peer-region", o.kv_peer_region,
                 "--role decode: copy the blocks the prefill instance holds in its "
                 "--kv-peer-region-bytes region straight out of it (same machine only; "
                 "default: off, blocks come as values over UCX)");
    cmd.add_flag("--kv-peer-compress,!--no-kv-peer-compress", o.kv_peer_compress,
                 "Disaggregated serving: code the blocks sent between instances losslessly as "
                 "--kv-remote-compress does (default: off)");
    cmd.add_option("--cache-salt-secret-file", o.cache_salt_secret_file,
                   "A file whose bytes key the tenants' cache salts: the same file on every "
                   "instance lets a tenant's prefix be shared across them")
        ->check(CLI::ExistingFile);
  }
  add_kv_cache_options(cmd, o.kv_cache);
}

EngineConfig engine_config(const EngineOptions& o) {
  EngineConfig c;
  c.model_dir = o.model_dir;
  c.tokenizer_dir = o.tokenizer_dir;
  c.structured_output_max_states = o.structured_output_max_states;
  c.structured_output_max_grammar_depth = o.structured_output_max_grammar_depth;
  c.structured_output_cache_size = o.structured_output_cache_size;
  c.dummy_weights = o.load_format == "dummy";
  c.mmap_weights = o.mmap_weights;
  c.cpu_bf16_matmul = o.cpu_matmul_precision == "bf16";
  c.dummy_dtype = parse_weight_dtype(o.dummy_dtype);
  c.num_threads = o.threads;
  c.device = o.device == "cuda" ? Device::kCuda
             : o.device == "cpu"  ? Device::kCpu
                                  : default_device();
  c.gpu_memory_utilization = o.gpu_memory_utilization;
  c.enforce_eager = o.enforce_eager;
  c.warm_up = o.warm_up ? WarmUp::kOn : o.no_warm_up ? WarmUp::kOff : WarmUp::kAuto;
  c.quantization = o.quantization == "fp8"    ? WeightQuantization::kFp8
                   : o.quantization == "none" ? WeightQuantization::kNone
                                              : WeightQuantization::kAuto;
  if (c.quantization == WeightQuantization::kFp8 && c.device != Device::kCuda) {
    // Every command refuses it here, also those whose CPU path builds no Engine (generate).
    throw Error("--quantization fp8 is not supported on --device cpu yet (FP8 weights run on "
                "--device cuda)");
  }
  c.block_size = o.block_size;
  c.num_blocks = o.num_blocks;
  c.kv_cache_memory_bytes = o.kv_cache_memory_bytes;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_model_len = o.max_model_len;
  c.enable_prefix_caching = o.enable_prefix_caching;
  c.disable_hybrid_kv_cache_manager = o.disable_hybrid_kv_cache_manager;
  c.preemption_mode =
      o.preemption_mode == "swap" ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
  c.swap_space_bytes = static_cast<int64_t>(o.swap_space_gib * double(int64_t{1} << 30));
  c.kv_offload_bytes = o.kv_offload_bytes;
  c.kv_disk_path = o.kv_disk_path;
  c.kv_disk_bytes = o.kv_disk_bytes;
  c.kv_offload_write_through = o.kv_offload_policy == "write-through";
  c.kv_prefetch = o.kv_prefetch;
  c.kv_remote_urls = o.kv_remote;
  c.kv_remote_cluster = o.kv_remote_cluster;
  c.kv_remote_timeout_ms = o.kv_remote_timeout_ms;
  c.kv_remote_ttl_seconds = o.kv_remote_ttl;
  c.kv_remote_compress = o.kv_remote_compress;
  c.kv_remote_read_always = o.kv_remote_read == "always";
  c.kv_role = o.role == "prefill"  ? KvRole::kPrefill
              : o.role == "decode" ? KvRole::kDecode
                                   : KvRole::kBoth;
  c.kv_peer_listen = o.kv_peer_listen;
  c.kv_peers = o.kv_peers;
  c.kv_peer_wait_ms = o.kv_peer_wait_ms;
  c.kv_peer_timeout_ms = o.kv_peer_timeout_ms;
  c.kv_peer_outbox_bytes = o.kv_peer_outbox_bytes;
  c.kv_peer_compress = o.kv_peer_compress;
  c.kv_peer_region_bytes = o.kv_peer_region_bytes;
  c.kv_peer_region = o.kv_peer_region;
  if (!o.cache_salt_secret_file.empty()) {
    std::ifstream in(o.cache_salt_secret_file, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    c.tenant_salt_secret = bytes.str();
    if (!in || c.tenant_salt_secret.empty()) {
      throw Error("--cache-salt-secret-file " + o.cache_salt_secret_file +
                  ": cannot be read, or is empty");
    }
  }
  c.kv_cache_dtype = parse_kv_cache_dtype_flag(o.kv_cache.kv_cache_dtype);
  c.calculate_kv_scales = o.kv_cache.calculate_kv_scales;
  c.allow_unit_kv_scales = o.kv_cache.allow_unit_kv_scales;
  c.kv_skip_layers = parse_kv_skip_layers_flag(o.kv_cache.skip_layers);
  c.kv_quant_check = o.kv_cache.kv_quant_check;
  c.kv_quant_check_threshold = o.kv_cache.kv_quant_check_threshold;
  c.kv_quant_check_progress = kv_quant_check_progress();  // called only when the check runs
  check_kv_int4_residual_flag(o.kv_cache.kv_int4_residual, c.block_size, c.kv_cache_dtype);
  c.kv_int4_residual = o.kv_cache.kv_int4_residual;
  if (o.kv_eviction_policy != "none") {
    c.kv_eviction.policy = parse_kv_eviction_policy(o.kv_eviction_policy);
  }
  c.kv_eviction.budget_tokens = o.kv_budget_tokens;
  c.kv_eviction.sink_tokens = o.kv_sink_tokens;
  c.kv_eviction.window_tokens = o.kv_window_tokens;
  set_snapkv_flags(o.kv_snapkv_selection, o.kv_pooling, o.kv_pool_kernel, c.kv_eviction);
  c.kv_eviction_prefill_interval_tokens = o.kv_eviction_prefill_interval;
  c.kv_compaction_copy_thread = o.kv_compaction_copy_thread;
  return c;
}

}  // namespace strata::cli

#pragma once
// EngineConfig: everything Engine::create needs to load a model and build the engine, with the
// enums that pick its device, scheduler and KV cache behaviour. Plain data; Engine::create checks
// it (InvalidArgument for anything out of range).

#include <cstdint>
#include <string>
#include <vector>

#include "strata/dtype.h"
#include "strata/kv_cache_dtype.h"
#include "strata/kv_eviction.h"
#include "strata/kv_quant_check_report.h"
#include "strata/kv_skip_layers.h"

namespace strata {

enum class PreemptionMode { kRecompute, kSwap };
enum class SchedulingPolicy { kFcfs, kPriority };
// kStatic exists only as the measured baseline: wait for max_batch_size requests or
// batch_timeout_ms, then run that batch to its longest request (finished requests keep their
// slots and blocks, padded), admitting nothing else meanwhile.
enum class SchedulerKind { kContinuous, kStatic };
// kContiguous reserves max_model_len slots for each request at admission (a contiguous KV
// allocator's behaviour, kv/contiguous_allocator.h): the baseline paging is measured against.
enum class KvAllocatorKind { kPaged, kContiguous };
// Where the model runs: the CPU backend (fp32 kernels, the KV pool in host memory) or the GPU
// (bf16 weights through cuBLASLt, the KV pool in device memory; builds with the CUDA toolkit).
enum class Device { kCpu, kCuda };
// Weight quantization (--quantization): none keeps the checkpoint's matrices (bf16 on the GPU);
// fp8 quantizes the decoder's linear layers to FP8 E4M3 at load with one scale per output channel
// (docs/gpu-engine.md, "FP8 weights"), GPU only for now; auto is fp8 on the GPU for a checkpoint
// that ships FP8 weights with a scale per channel or per tensor (compressed-tensors, FBGEMM),
// none otherwise (ModelConfig::fp8_weights_per_channel).
enum class WeightQuantization { kAuto, kNone, kFp8 };
// What an instance does in disaggregated serving (--role): both prefill and decode (colocated),
// prefill only (its blocks read by decode instances), or decode (its prompts' blocks read from a
// prefill instance).
enum class KvRole { kBoth, kPrefill, kDecode };
// kCuda when this build has the CUDA backend and a GPU is present, else kCpu (`--device auto`).
Device default_device();
const char* device_name(Device device);

// EngineConfig::warm_up.
enum class WarmUp { kAuto, kOn, kOff };

struct EngineConfig {
  // ---- model (read by Engine::create) ------------------------------------------------------
  std::string model_dir;
  // Where tokenizer.json is, when not in model_dir (--tokenizer; dummy weights of a config-only
  // directory). Text prompts and structured outputs need one.
  std::string tokenizer_dir;
  bool dummy_weights = false;  // --load-format dummy
  DType dummy_dtype = DType::kBF16;
  // CPU: serve the weights from the mapped safetensors files (--mmap) instead of a copy in
  // huge-page anonymous memory made at start-up (the default: faster steps, the weights' size in
  // memory).
  bool mmap_weights = false;
  // CPU: BF16 weights multiplied on the BF16 dot-product instructions with activations rounded
  // to BF16 (--cpu-matmul-precision bf16; AVX-512 BF16 only) instead of the exact fp32 path.
  // Either way a request's results are the same alone or batched.
  bool cpu_bf16_matmul = false;
  int32_t num_threads = 0;  // 0 = every core
  Device device = Device::kCpu;
  WeightQuantization quantization = WeightQuantization::kAuto;  // --quantization

  // ---- KV cache ---------------------------------------------------------------------------
  int32_t block_size = 16;  // 8, 16, 32, 64 or 128
  // Blocks in the pool, the null block included; 0 = kv_cache_memory_bytes / block bytes.
  int32_t num_blocks = 0;
  // 0 = automatic: 1 GiB on the CPU; on the GPU, what gpu_memory_utilization leaves after the
  // weights, activations and workspaces (measured at start-up, vLLM's semantics).
  int64_t kv_cache_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  // Token eviction for requests that name none, or name only some fields (--kv-eviction-policy,
  // --kv-budget-tokens; docs/kv-eviction.md). Unset: no eviction.
  KvEvictionParams kv_eviction;
  // While a prompt is computed under eviction, the policy runs every this many tokens, so a
  // prefill chunk stops at the first multiple of it past the budget and a sequence holds up to
  // this many slots past its budget during a step. A multiple of block_size; 0 = automatic: one
  // block on the CPU (the tightest hold), 512 tokens on the GPU, whose steps cost nearly as much
  // for 16 tokens as for 512 (--kv-eviction-prefill-interval).
  int32_t kv_eviction_prefill_interval_tokens = 0;
  // Token-level eviction's compaction copies run on a copy thread, overlapping the rest of the
  // step and the time between steps, and the engine waits for them before its next step
  // schedules (--kv-compaction-copy-thread); false (the default) copies on the step thread right
  // after the sequence's step. Either way the same tokens and logits. Off by default: on the
  // 2-core CPU the handoff cost more step time than the copies it moved (docs/benchmarks.md).
  bool kv_compaction_copy_thread = false;
  // GPU: issue every launch each step instead of replaying decode steps from CUDA graphs.
  bool enforce_eager = false;
  // Before the engine takes requests, one request of the largest prompt step
  // (max_num_batched_tokens tokens, or the longest the pool holds) and one decode step runs and
  // is forgotten (its cached blocks and its counts), so that the one-time costs of the first
  // forward passes -- kernel modules loaded on first launch, cuBLASLt's choices for the step's
  // shapes, the first decode step -- are paid at start rather than by the first request.
  // kAuto, the default: on the GPU only (on the CPU the costs are the weights' and
  // activations' first page faults, not worth a prompt step in every engine a test or tool
  // makes); kOn (--warm-up): on either device; kOff (--no-warm-up).
  WarmUp warm_up = WarmUp::kAuto;
  // KV cache dtype (--kv-cache-dtype; docs/kv-quant.md). kAuto, the default, stores the
  // device's model precision: float32 on the CPU, bfloat16 on the GPU. CPU: any of float32,
  // bfloat16, float16, fp8_e4m3 / fp8_e5m2 (per-layer static scales), int8 (a dynamic scale per
  // token and KV head) or int4 (KIVI, its newest blocks at full precision beside the codes). The
  // GPU: bfloat16, fp8, int8 or int4 (no float16 or float32: its activations are bf16).
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  // I4 only (--kv-int4-residual N): the newest N tokens' blocks are read at full precision from
  // the newest-blocks group -- N a positive multiple of block_size, 0 = block_size (R = N /
  // block_size blocks: a query's own block and the R - 1 before it). That group's pool
  // (max_num_seqs x (R + 1) + ceil(max_num_batched_tokens / block_size) + 1 blocks, F32 on the
  // CPU, BF16 on the GPU) comes out of kv_cache_memory_bytes before the int4 pool is sized.
  int32_t kv_int4_residual = 0;
  // FP8 KV scales: compute them at start-up from a calibration pass (overrides the checkpoint's),
  // or accept 1.0 when neither exists (otherwise creation fails: see engine/kv_scales_setup.h).
  bool calculate_kv_scales = false;
  bool allow_unit_kv_scales = false;
  // Per-layer exceptions (docs/kv-quant.md): these layers keep the model precision (F32 on the
  // CPU, BF16 on the GPU: what auto picks) while the others hold kv_cache_dtype --
  // --kv-cache-dtype-skip-layers (indices checked against the model at creation), and with
  // kv_quant_check every layer whose output KL at start-up (engine/kv_quant_check.h, measured
  // with the serving device's own kernels) is above kv_quant_check_threshold (nats per token).
  KvSkipLayers kv_skip_layers;
  bool kv_quant_check = false;
  double kv_quant_check_threshold = kDefaultKvQuantCheckThreshold;
  KvQuantCheckProgress kv_quant_check_progress;  // after each of the check's passes
  bool enable_prefix_caching = true;
  // A model whose layers mix sliding-window and full attention keeps its windowed layers' K/V in
  // a KV cache group of their own, which gives back what the window has passed (CPU; docs/kv.md,
  // "KV cache groups"). true keeps every layer's blocks in one pool, as a full-attention model
  // does (--disable-hybrid-kv-cache-manager).
  bool disable_hybrid_kv_cache_manager = false;
  std::string tenant_salt_secret;  // key of the per-tenant salts; empty = random
  KvAllocatorKind allocator = KvAllocatorKind::kPaged;

  // ---- scheduling ---------------------------------------------------------------------------
  int32_t max_num_seqs = 256;             // sequences in one step
  int32_t max_num_batched_tokens = 2048;  // tokens in one step (decodes + prefill chunks)
  int64_t max_model_len = 0;              // 0 = the model's max_position_embeddings
  // Admission keeps this share of the pool free, so running decodes are not starved.
  double watermark = 0.01;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  int64_t swap_space_bytes = int64_t{4} << 30;  // host memory for swapped-out blocks
  // ---- KV tiers under the pool (docs/kv.md, "KV tiers") ----------------------------------------
  // Blocks the pool evicts from its prefix cache go to a host-memory tier of kv_offload_bytes
  // (> 0 turns the tiers on), and blocks that tier drops to make room go to files under
  // kv_disk_path (at most kv_disk_bytes of them), which a later engine over the same directory
  // and the same model and cache layout serves again. A request's prefix past what the pool holds
  // comes back from them before it is admitted.
  int64_t kv_offload_bytes = 0;
  std::string kv_disk_path;
  int64_t kv_disk_bytes = 0;
  // A block goes to the host tier when the pool evicts it (false), or as soon as it is cached
  // (true, write-through: its eviction then costs nothing).
  bool kv_offload_write_through = false;
  // A queued request's prefix blocks on disk start loading into host memory at once, and the
  // request is admitted when they are there (false: read at admission, on the scheduler thread).
  bool kv_prefetch = true;
  // A Redis server under the host tier (redis://HOST[:PORT][/DB]; empty = none); several
  // independent servers, each block on one of them by rendezvous hashing of its key (every
  // instance must name the same servers the same way; no server twice); or with
  // kv_remote_cluster a Redis Cluster's seed nodes. Shared by every instance that points at it
  // (docs/kv.md, "The remote tier"): blocks go there as they reach the host tier, and a queued
  // request's prefix past host memory and disk is read from it in one round trip (per server or
  // cluster master). Each call waits at most kv_remote_timeout_ms; keys live
  // kv_remote_ttl_seconds (0: until Redis evicts them). kv_remote_compress codes the values
  // losslessly as suits the pool's dtype (BF16 split, F16 and FP8 zstd; docs/kv-codec.md): it pays
  // where Redis takes values slower than one core codes them, not on a fast local server.
  // Sharing tenants' blocks across instances needs the same tenant_salt_secret on each.
  // kv_remote_read_always reads every block the other tiers lack and admits the request when
  // they are there; off (auto), only reads expected to end before this instance would compute
  // the blocks are made, and a request is computed when its read runs past that (docs/kv.md,
  // "The remote tier").
  std::vector<std::string> kv_remote_urls;
  bool kv_remote_cluster = false;
  int32_t kv_remote_timeout_ms = 200;
  int64_t kv_remote_ttl_seconds = 0;
  bool kv_remote_compress = false;
  bool kv_remote_read_always = false;
  // ---- prefill/decode disaggregation (docs/kv.md, "Disaggregation") ---------------------------
  // kv_role kPrefill: every block computed goes down to the host tier as soon as it is cached
  // (write-through) and is kept, coded, in an outbox of kv_peer_outbox_bytes (0: as many as
  // kv_offload_bytes) that decode instances read over the peer transport (UCX) on
  // kv_peer_listen (HOST:PORT, port 0 for any free one: Engine::kv_peer_address says which).
  // kDecode: the blocks a queued prompt lacks are read from the prefill instances at kv_peers
  // (their --kv-peer-listen addresses; each read asks the one that had the last blocks first,
  // then the others) into the host tier before the request is admitted; a block not there yet is asked
  // for again until kv_peer_wait_ms have passed, each round trip bounded by kv_peer_timeout_ms;
  // what does not come is computed here. Both need a host tier (kv_offload_bytes) and the same
  // model, block size and KV dtype on both instances (and the same tenant_salt_secret when
  // tenants are salted); kv_peer_compress codes the values as kv_remote_compress does.
  KvRole kv_role = KvRole::kBoth;
  std::string kv_peer_listen = "127.0.0.1:0";
  std::vector<std::string> kv_peers;
  int32_t kv_peer_wait_ms = 1000;
  int32_t kv_peer_timeout_ms = 2000;
  int64_t kv_peer_outbox_bytes = 0;
  bool kv_peer_compress = false;
  // One machine: kPrefill with kv_peer_region_bytes > 0 also copies every block it writes down
  // into a region of that many bytes (on top of the pool: CUDA IPC device memory on the GPU,
  // POSIX shared memory on the CPU) that decode instances on this machine map; kDecode with
  // kv_peer_region asks for such blocks' slot records and copies the blocks out of the region
  // (a region that does not open here falls back to values). docs/kv.md, "One machine".
  int64_t kv_peer_region_bytes = 0;
  bool kv_peer_region = false;
  // ---- KV events for routers (docs/kv-events.md) ---------------------------------------------
  // A non-empty kv_events_endpoint publishes the pool's prefix-cache events (BlockStored,
  // BlockRemoved, AllBlocksCleared) on a ZeroMQ PUB socket in vLLM's msgpack format, one batch per
  // step that produced any, every message led by kv_events_topic; kv_events_replay_endpoint (a
  // ROUTER) answers requests for the last kv_events_buffer_steps batches. kv_events_hwm is PUB's
  // high-water mark; the publisher thread's queue holds kv_events_max_queue_batches. A slow or
  // absent subscriber never slows the engine: what does not fit is dropped and counted
  // (EngineTotals::kv_events_dropped_blocks).
  std::string kv_events_endpoint;
  std::string kv_events_replay_endpoint;
  std::string kv_events_topic;
  int32_t kv_events_buffer_steps = 10000;
  int32_t kv_events_hwm = 100000;
  int32_t kv_events_max_queue_batches = 100000;
  SchedulerKind scheduler = SchedulerKind::kContinuous;
  int32_t max_batch_size = 32;      // static scheduler only
  double batch_timeout_ms = 100.0;  // static scheduler only
  // Empty = the checkpoint's: config.json's, then model_dir's generation_config.json's.
  std::vector<int32_t> eos_token_ids;

  // ---- structured outputs (SamplingParams::structured; docs/grammar.md) ----------------------
  // A constraint whose automaton would pass structured_output_max_states states is refused, as
  // is a JSON schema whose regex would pass structured_output_max_regex_bytes; the engine keeps
  // the structured_output_cache_size most recently used compiled constraints. An EBNF grammar's
  // nesting is expanded to at most structured_output_max_grammar_depth levels, the deepest that
  // fits those bounds (deeper nesting cannot be generated; docs/grammar.md, "EBNF grammars").
  int32_t structured_output_max_states = 1 << 16;
  int32_t structured_output_max_grammar_depth = 6;
  int64_t structured_output_max_regex_bytes = int64_t{1} << 20;
  int32_t structured_output_cache_size = 64;
};

}  // namespace strata

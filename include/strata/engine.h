#pragma once
// strata::Engine: the C++ API of the serving engine. Requests go in at any time; each step()
// runs one iteration over every running request (continuous batching) and returns what each
// request produced in it (a stream of deltas); cancel() stops a request at once.
//
//   auto engine = strata::Engine::create(config);          // loads the model, sizes the KV pool
//   strata::RequestId id = *(*engine)->submit(request);
//   while ((*engine)->has_unfinished()) {
//     for (const strata::RequestOutput& out : *(*engine)->step()) { ... }
//   }
//
// Scheduling (src/engine/scheduler.h): each step takes the running decodes, then partly done and
// new prefills, under max_num_seqs and max_num_batched_tokens; long prompts are prefilled in
// chunks; a request's cached prefix skips prefill; finished and cancelled requests give their
// blocks back (or to the prefix cache) within the step, and waiting requests take them in the
// same step. When blocks run out the most recently admitted request (lowest priority first under
// the priority policy) is preempted: recomputed later, or swapped to host memory and back.
// n > 1 prefills the prompt once and forks n sequences that share its KV (copy-on-write).
//
// Not thread-safe: one thread submits, cancels and steps (the server's engine thread).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/kv_quant_check.h"
#include "engine/sampling_params.h"
#include "engine/token_output.h"
#include "kv/kv_cache_dtype.h"
#include "kv/kv_layer_dtypes.h"

namespace strata {

using engine::FinishReason;
using engine::SamplingParams;
using engine::TokenLogprobs;

namespace model {
class Model;
struct ModelConfig;
}
class ThreadPool;

using RequestId = uint64_t;

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
// (docs/gpu-engine.md, "FP8 weights"). GPU only for now.
enum class WeightQuantization { kNone, kFp8 };
// kCuda when this build has the CUDA backend and a GPU is present, else kCpu (`--device auto`).
Device default_device();
const char* device_name(Device device);

struct EngineConfig {
  // ---- model (used by Engine::create; the borrowing constructor takes a loaded model) --------
  std::string model_dir;
  bool dummy_weights = false;          // --load-format dummy
  DType dummy_dtype = DType::kBF16;
  int32_t num_threads = 0;             // 0 = every core
  Device device = Device::kCpu;
  WeightQuantization quantization = WeightQuantization::kNone;  // --quantization

  // ---- KV cache ---------------------------------------------------------------------------
  int32_t block_size = 16;             // 8, 16, 32, 64 or 128
  // Blocks in the pool, the null block included; 0 = kv_cache_memory_bytes / block bytes.
  int32_t num_blocks = 0;
  // 0 = automatic: 1 GiB on the CPU; on the GPU, what gpu_memory_utilization leaves after the
  // weights, activations and workspaces (measured at start-up, vLLM's semantics).
  int64_t kv_cache_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  // GPU: issue every launch each step instead of replaying decode steps from CUDA graphs.
  bool enforce_eager = false;
  // KV cache dtype (--kv-cache-dtype; docs/kv-quant.md). kAuto, the default, stores the
  // device's model precision: float32 on the CPU, bfloat16 on the GPU. CPU: any of float32,
  // bfloat16, float16, fp8_e4m3 / fp8_e5m2 (per-layer static scales), int8 (a dynamic scale per
  // token and KV head) or int4 (KIVI, with a full-precision residual pool). The GPU: bfloat16,
  // fp8, int8 or int4 (no float16 or float32: its activations are bf16).
  kv::KvCacheDType kv_cache_dtype = kv::KvCacheDType::kAuto;
  // I4 only (--kv-int4-residual N): the newest N tokens' blocks are read at full precision from
  // the residual pool -- N a positive multiple of block_size, 0 = block_size (R = N / block_size
  // blocks: a query's own block and the R - 1 before it). The residual pool
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
  kv::KvSkipLayers kv_skip_layers;
  bool kv_quant_check = false;
  double kv_quant_check_threshold = engine::kDefaultKvQuantCheckThreshold;
  engine::KvQuantCheckProgress kv_quant_check_progress;  // after each of the check's passes
  bool enable_prefix_caching = true;
  // A model whose layers mix sliding-window and full attention keeps its windowed layers' K/V in
  // a KV cache group of their own, which gives back what the window has passed (CPU; docs/kv.md,
  // "KV cache groups"). true keeps every layer's blocks in one pool, as a full-attention model
  // does (--disable-hybrid-kv-cache-manager).
  bool disable_hybrid_kv_cache_manager = false;
  std::string tenant_salt_secret;      // key of the per-tenant salts; empty = random
  KvAllocatorKind allocator = KvAllocatorKind::kPaged;

  // ---- scheduling ---------------------------------------------------------------------------
  int32_t max_num_seqs = 256;            // sequences in one step
  int32_t max_num_batched_tokens = 2048; // tokens in one step (decodes + prefill chunks)
  int64_t max_model_len = 0;             // 0 = the model's max_position_embeddings
  // Admission keeps this share of the pool free, so running decodes are not starved.
  double watermark = 0.01;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  int64_t swap_space_bytes = int64_t{4} << 30;  // host memory for swapped-out blocks
  SchedulerKind scheduler = SchedulerKind::kContinuous;
  int32_t max_batch_size = 32;       // static scheduler only
  double batch_timeout_ms = 100.0;   // static scheduler only
  // Empty = the checkpoint's: config.json's, then model_dir's generation_config.json's.
  std::vector<int32_t> eos_token_ids;
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids; when empty, prompt_text is encoded instead
  // Text, encoded with the model directory's tokenizer.json (special tokens added, as the
  // tokenizer's post-processor says). InvalidArgument when the directory has no tokenizer.
  std::string prompt_text;
  SamplingParams params;
  int32_t n = 1;                // sequences to generate from the prompt (their seeds: seed + i)
  std::string cache_salt;       // the client's prefix-cache salt
  std::string tenant;           // the engine salts each tenant's requests itself
  int32_t priority = 0;         // priority policy: lower runs first (vLLM's convention)
  // Scoring: return the logits at every prompt position in RequestOutput::prompt_logits. The
  // prompt is then computed whole (never served by the prefix cache, which it still fills).
  bool prompt_logits = false;
};

// One sequence's progress in one step.
struct CompletionDelta {
  int32_t index = 0;                          // which of the request's n sequences
  std::vector<int32_t> token_ids;             // new tokens this step
  std::vector<TokenLogprobs> logprobs;        // one per new token when params.logprobs >= 0
  std::optional<FinishReason> finish_reason;  // set in the step it finishes
};

struct RequestMetrics {
  double arrival_time = 0.0;      // seconds on the engine's steady clock
  double first_scheduled_time = 0.0;
  double first_token_time = 0.0;  // 0 until the first token
  double finished_time = 0.0;     // 0 until finished
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache (first admission)
  int32_t num_preemptions = 0;
};

struct RequestOutput {
  RequestId id = 0;
  std::vector<CompletionDelta> deltas;  // the sequences that advanced or finished this step
  // Once, with the first delta, when params.prompt_logprobs >= 0 (the first entry is nullopt).
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  // Once, with the first delta, when the request set prompt_logits: [num_prompt, vocab]
  // row-major, row p the logits after prompt token p (the row that scores token p + 1).
  std::vector<float> prompt_logits;
  bool finished = false;  // every sequence finished (or the request was cancelled)
  bool cancelled = false;
  RequestMetrics metrics;
};

// One KV cache group (docs/kv.md, "KV cache groups"): what it keeps of a sequence, and its pool.
struct KvGroupStats {
  std::string kind;           // "full attention", "sliding window" or "newest blocks"
  int32_t window = 0;         // sliding window: positions a query reads
  int32_t newest_blocks = 0;  // newest blocks (INT4's full-precision blocks): R
  int32_t num_blocks = 0;     // the null block included
  int32_t num_used_blocks = 0;
  int64_t block_bytes = 0;  // one block of the group's pool (its layers, K and V, scales)
  int64_t pool_bytes() const { return block_bytes * num_blocks; }
};

// What the last step did, and the engine's state after it.
struct EngineStepStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t num_swapped = 0;
  int32_t num_scheduled_seqs = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_preempted = 0;      // this step
  double schedule_seconds = 0.0;  // scheduling and batch building, not the forward pass
  // The runner's part: copy-on-write copies and the forward pass, until the step's tokens (or
  // logits) are back on the host; 0 when nothing ran. step_seconds less this and
  // schedule_seconds is the host's own work after the forward pass (sampling on the host,
  // stop checks, outputs).
  double forward_seconds = 0.0;
  double step_seconds = 0.0;  // the whole step
  int32_t num_used_blocks = 0;
  int32_t num_free_blocks = 0;
  // Blocks the prefix cache holds (full blocks indexed by their hash, in use or freed and
  // evictable); 0 with prefix caching off.
  int32_t num_cached_blocks = 0;
  int64_t live_token_slots = 0;   // tokens in the pool (shared blocks once)
  int64_t capacity_token_slots = 0;
};

struct EngineTotals {
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t num_swapped_out_blocks = 0;
  int64_t num_swapped_in_blocks = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t num_evictions = 0;
};

class EngineImpl;

class Engine {
 public:
  // Loads config.model_dir (or dummy weights) and builds the engine. InvalidArgument / NotFound
  // for a bad config or checkpoint.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config);
  // Borrows a loaded model and a thread pool (tests, benchmarks, several engines on one model).
  static Result<std::unique_ptr<Engine>> create(model::Model& model, ThreadPool& pool,
                                                const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. InvalidArgument (nothing queued) for an empty prompt, a token id outside
  // the vocabulary, invalid sampling params, n < 1, or prompt + max_tokens beyond max_model_len
  // or beyond what the whole pool can hold.
  Result<RequestId> submit(EngineRequest request);
  // Stops a request now: its blocks are freed (or kept by the prefix cache) before this returns,
  // and the next step() reports it finished and cancelled. Unknown or finished ids are ignored.
  void cancel(RequestId id);

  // One iteration: schedule, run the forward pass, sample, return the outputs. An error is
  // internal (the forward pass failed); requests stay queued.
  Result<std::vector<RequestOutput>> step();

  bool has_unfinished() const;
  const EngineStepStats& last_step() const;
  EngineTotals totals() const;
  const EngineConfig& config() const;
  int32_t vocab_size() const;
  const model::ModelConfig& model_config() const;
  // KV bytes per token of the pool (all layers, K and V), and the pool's size in blocks (the
  // null block included): what start-up prints and /metrics reports.
  int64_t kv_bytes_per_token() const;
  // Of which per-token scales (I8), and the pool's element type (kv_cache_dtype resolved: auto
  // is the device's precision).
  int64_t kv_scale_bytes_per_token() const;
  DType kv_dtype() const;
  // Where the FP8 scales came from ("checkpoint k_scale/v_scale", "calculated over N calibration
  // tokens", "1.0 (--allow-unit-kv-scales)"); empty for other dtypes.
  const std::string& kv_scales_source() const;
  // The element type of each layer of the pool (kv_dtype() everywhere but the per-layer
  // exceptions), and the --kv-quant-check report when the check ran.
  std::vector<DType> kv_layer_dtypes() const;
  const std::optional<engine::KvQuantCheckReport>& kv_quant_check() const;
  int32_t num_blocks() const;
  // The most tokens (prompt + max_tokens) one request can have: max_model_len, or less when the
  // KV pool cannot hold that many for one sequence. What the server advertises as max_model_len.
  int64_t max_request_tokens() const;
  // The KV cache groups, group 0 first: one for most models, two for an INT4 cache (its codes,
  // and its newest R blocks at full precision: kind "newest blocks") or a model whose layers mix
  // sliding-window and full attention (its windowed layers: kind "sliding window"). Each with
  // its pool's blocks and the blocks requests hold now.
  std::vector<KvGroupStats> kv_groups() const;
  int64_t weight_bytes() const;
  Device device() const;
  // Seconds on the clock the metrics use.
  double now() const;

 private:
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace strata

#pragma once
// CudaModel: one Llama-family decoder on the GPU -- its weights (cuda_weights.h), the KV pool in
// device memory (the pool layout of src/kv/kv_layout.h, so block ids, copy-on-write and the
// prefix cache work unchanged), activation scratch for max_num_tokens rows, and the step that
// runs a ForwardBatch through every layer (docs/gpu-engine.md):
//
//   embed -> per layer: RMSNorm -> qkv GEMM (+bias) -> [q/k RMSNorm] + RoPE -> KV append
//            -> paged attention (decode kernel when every sequence has one new token, else the
//            prefill kernel) -> o GEMM accumulated into the fp32 residual -> RMSNorm
//            -> gate|up GEMM -> SiLU*mul -> down GEMM accumulated into the residual
//         -> final RMSNorm of the rows whose logits are wanted or sampled -> LM head GEMM (fp32
//            logits) -> the sampling kernel for sample rows; only logits rows cross to the host
//
// Decode steps whose rows are all sampled on the GPU replay a CUDA graph captured for their
// padded batch size and KV-length bound (inputs at fixed addresses, cuda_step_inputs.h), so the
// ~10 launches per layer cost one graph launch.
//
// Gemma3ForCausalLM (the flags of ModelConfig, as the CPU engine runs them): its (1 + weight)
// norms' weights are uploaded as 1 + weight, the embeddings are scaled, the attention scale is
// 1 / sqrt(query_pre_attn_scalar), the sliding layers rotate by their own RoPE table and mask
// their window in the attention kernels, the MLP is GeGLU (gelu_tanh after a plain gate|up
// GEMM), the o and down products are normed (sandwich norms) before their residual adds, and the
// logits are soft-capped. Its sliding and global layers share the one pool: the GPU runner has no
// window group (docs/gpu-engine.md).
//
// INT4 (KIVI) layers keep each sequence's newest blocks at full precision in a second device
// pool, the newest-blocks group's (docs/kv.md, "INT4's newest-blocks group"): bf16 blocks of
// kv::newest_blocks_spec's shape with their own block ids. Their K/V append goes to it, the
// blocks a step fills are then quantized into the int4 pool, and attention reads both (the
// batch's view of that group says which blocks where).
//
// The residual stream is fp32; GEMM inputs are bf16 with fp32 accumulation. Sizing the pool:
// an explicit num_blocks, else kv_cache_memory_bytes, else gpu_memory_utilization x total GPU
// memory minus what the process uses after weights, scratch and workspaces are allocated (vLLM's
// semantics, measured rather than estimated). The newest-blocks pool is allocated first and
// comes out of that budget.
//
// Not thread-safe: one step at a time, on the model's own stream. forward() returns when the
// logits are on the host.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "model/model_runner.h"

namespace strata::model {

struct CudaModelOptions {
  std::filesystem::path model_dir;  // config.json (and the weights unless dummy)
  LoadFormat load_format = LoadFormat::kAuto;
  uint64_t dummy_seed = 0;
  // BF16, or F8E4M3: the decoder layers' matrices (qkv, o, gate|up, down) quantized once on the
  // GPU at load to e4m3 with one fp32 scale per output channel (embedding and LM head stay bf16).
  DType weight_dtype = DType::kBF16;
  // BF16, or a quantized cache read with BF16 queries: F8E4M3 / F8E5M2 (with kv_scales), I8 or
  // I4 (with a newest-blocks pool; docs/kv-quant.md).
  DType kv_dtype = DType::kBF16;
  kv::KvStaticScales kv_scales;    // FP8: one K and one V scale per layer; empty = 1.0
  // Per-layer exceptions (--kv-cache-dtype-skip-layers): one entry per layer, each BF16 or
  // kv_dtype (kv::kv_layer_dtypes); empty = kv_dtype in every layer.
  std::vector<DType> kv_layer_dtypes;
  int32_t block_size = 16;
  int32_t max_num_tokens = 2048;   // most token rows in one forward (max_num_batched_tokens)
  int32_t max_num_seqs = 256;      // most sequences in one forward
  int32_t num_blocks = 0;          // > 0: exactly this many pool blocks (null block included)
  int64_t kv_cache_memory_bytes = 0;   // > 0: the KV memory in bytes, newest-blocks pool included
  double gpu_memory_utilization = 0.9; // else: this share of the GPU for everything
  // INT4: the newest-blocks group's pool blocks, the null block included
  // (kv::newest_blocks_pool_size sizes it): > 1 exactly when some layer is I4, else 0.
  // newest_blocks = R >= 1, the blocks a query reads at full precision (--kv-int4-residual /
  // block_size); it sizes the graph inputs' newest-blocks arrays (R + 1 entries per sequence),
  // and batches of another R run eagerly.
  int32_t num_newest_blocks = 0;
  int32_t newest_blocks = 1;
  int64_t max_model_len = 0;       // longest sequence (sizes the graph inputs); 0 = the model's
  // Off: decode steps (one token per sequence, every row sampled on the GPU) are captured once
  // per (padded batch size, KV-length bound) as CUDA graphs and replayed. On: every launch is
  // issued each step (vLLM's --enforce-eager).
  bool enforce_eager = false;
};

// Start-up figures, printed by the CLI and reported by benchmarks.
struct CudaModelInfo {
  int64_t weight_bytes = 0;
  int64_t scratch_bytes = 0;     // activations, staging and workspaces
  int64_t kv_pool_bytes = 0;
  int64_t newest_pool_bytes = 0;  // INT4's bf16 newest-blocks pool (0 without one)
  int64_t gpu_total_bytes = 0;
  int32_t num_blocks = 0;
  int32_t num_newest_blocks = 0;  // null block included; 0 without a newest-blocks pool
};

class CudaModel final : public ModelRunner {
 public:
  // The runner of a parsed config over the opened checkpoint `weights` (null exactly when
  // options.load_format is dummy): the engine's runner factory parses and opens each once.
  // Throws strata::Error for unusable files or options (no GPU, unsupported head dim or dtype,
  // a pool with no room); CUDA failures after that are Status values.
  static std::unique_ptr<CudaModel> create(ModelConfig config, const WeightStore* weights,
                                           const CudaModelOptions& options);
  // The same after parsing options.model_dir's config.json and opening its weights (tests and
  // benchmarks, which build a runner alone).
  static std::unique_ptr<CudaModel> create(const CudaModelOptions& options);
  // True when the CUDA runtime sees at least one device.
  static bool device_available();
  ~CudaModel() override;
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const CudaModelInfo& info() const;

  // Largest |k| and |v| per layer as kv_append receives them (after RoPE and the q/k norms, in
  // bf16) over one forward pass of tokens (positions 0..n-1) through a scratch BF16 pool; the
  // serving pool is untouched. What --calculate-kv-scales turns into FP8 scales on the GPU.
  Result<std::vector<std::pair<float, float>>> kv_abs_max(std::span<const int32_t> tokens);
  // Replaces an FP8 pool's static scales; only before the first step (the scales are baked into
  // captured graphs). InvalidArgument otherwise or for scales of the wrong size.
  Status set_kv_static_scales(kv::KvStaticScales scales);

  // --kv-quant-check on the GPU (engine/kv_quant_check.h), measured with this model's own
  // kernels: passes of tokens (positions 0..n-1) through scratch pools of the serving pool's
  // block size and FP8 scales, the serving pool untouched. One pass with a bf16 cache, then one
  // per layer l with only layer l in the cache's dtype (an int4 layer with its R newest blocks),
  // every other layer bf16. Per layer:
  //   output_kl   the mean over every position of KL(p || p_l), p the next-token distribution of
  //               the bf16 pass and p_l that of pass l (host logits, rows over `pool`);
  //   attn_error  ||o_l - o|| / ||o|| of layer l's attention output in those two passes. Layers
  //               before l are bf16 in both, so layer l sees the same queries and the figure is
  //               what reading its own K/V quantized does.
  // num_layers + 1 passes; after_pass (when set) after each. InvalidArgument for a bf16 cache,
  // no tokens or a token outside the vocabulary.
  struct KvQuantFigures {
    std::vector<double> output_kl;
    std::vector<double> attn_error;
  };
  Result<KvQuantFigures> kv_quant_check(std::span<const int32_t> tokens, ThreadPool& pool,
                                        const std::function<void()>& after_pass = {});
  // Lays the pool out again with these per-layer dtypes (check_layer_dtypes' rule; empty = the
  // cache's dtype everywhere), sized from the same budget: what --kv-quant-check's kept layers
  // become. Only before the first step. An int4 layout that no longer has an int4 layer drops
  // its newest-blocks pool. InvalidArgument after a step, for dtypes the model cannot hold, or
  // for an int4 layer in a model created without one; ResourceExhausted when the new
  // layout leaves no room (the model then has no pool and must not run).
  Status set_kv_layer_dtypes(std::vector<DType> layer_dtypes);

  // The FP8-weight test's knock-out: multiplies every FP8 weight scale of layer `layer` by
  // `factor` (a scale the products then misapply). InvalidArgument for BF16 weights or a layer out
  // of range.
  Status scale_fp8_weight_scales(int32_t layer, float factor);

  const ModelConfig& config() const override;
  int64_t weight_bytes() const override { return info().weight_bytes; }
  // Pool 0, and for INT4 pool 1: the newest-blocks group's (bf16, on the device).
  int32_t num_kv_pools() const override { return info().num_newest_blocks > 0 ? 2 : 1; }
  const kv::KvLayout& kv_layout(int32_t pool = 0) const override;
  int32_t num_blocks(int32_t pool = 0) const override {
    return pool == 0 ? info().num_blocks : info().num_newest_blocks;
  }
  // Copy-on-write: copies whole blocks of a device pool before the step that writes them.
  Status copy_blocks(int32_t pool, std::span<const kv::BlockCopy> copies) override;
  // Swap preemption's copies between a pool and host memory (cuda_block_mover.h).
  kv::BlockMover& block_mover(int32_t pool = 0) override;
  std::unique_ptr<kv::BlockMover> new_block_mover(int32_t pool = 0) override;
  // As Model::forward, with the KV pools on the device. InvalidArgument / OutOfRange for an
  // inconsistent batch (checked on the host before anything runs).
  bool samples_on_device() const override { return true; }
  Status forward(const ForwardBatch& batch, std::span<float> logits,
                 std::span<SampledToken> sampled) override;

 private:
  struct Impl;
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::model

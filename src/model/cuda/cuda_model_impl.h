#pragma once
// CudaModel's state, shared by the files that implement it: cuda_model.cc (start-up, the step,
// graphs, block copies) and cuda_model_calibration.cc (the start-up passes over calibration
// tokens through scratch pools: FP8 scales, --kv-quant-check, the pool's re-layout). Private to
// src/model/cuda.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <compare>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/stream.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"
#include "model/cuda/cuda_block_mover.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/cuda_step_inputs.h"
#include "model/cuda/cuda_weights.h"
#include "model/mask_thread.h"

namespace strata::model {

// The model's KV spec for one dtype in every layer.
kv::KvSpec kv_spec(const ModelConfig& c, DType dtype);

// OK when layer_dtypes is empty or holds one entry per layer, each bfloat16 or kv_dtype.
Status check_layer_dtypes(const ModelConfig& config, DType kv_dtype,
                          std::span<const DType> layer_dtypes);

// The pool's spec: kv_dtype, with the per-layer exceptions when there are any.
inline kv::KvSpec pool_spec(const ModelConfig& c, const CudaModelOptions& o) {
  kv::KvSpec spec = kv_spec(c, o.kv_dtype);
  spec.layer_dtypes = o.kv_layer_dtypes;
  return spec;
}

// An instantiated graph; destroyed with its owner.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  GraphExec() = default;
  GraphExec(GraphExec&& o) noexcept : exec(std::exchange(o.exec, nullptr)) {}
  GraphExec& operator=(GraphExec&&) = delete;
  GraphExec(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

// Where run_layer copies each layer's attention output [tokens x q heads x head dim] (bf16) to
// while set: out[l] for every layer l with a non-null entry, from row `row0` on (a pass in
// chunks). --kv-quant-check's attention error reads them.
struct AttentionCapture {
  std::vector<std::vector<uint16_t>*> out;  // [num_layers]
  int64_t row0 = 0;
};

struct CudaModel::Impl {
  ModelConfig config;
  CudaModelOptions options;
  kv::KvLayout layout;
  CudaModelInfo info;
  cuda::Stream stream;
  cuda::Gemm gemm;
  CudaDecoderWeights weights;
  cuda::DeviceBuffer inv_freq;  // [head_dim / 2] fp32
  // Gemma 3: the sliding-window layers' RoPE table when it differs (ModelConfig::sliding_rope),
  // else empty; the embedding scale (1 for every other model).
  cuda::DeviceBuffer sliding_inv_freq;  // [head_dim / 2] fp32
  float embed_scale = 1.0f;
  // Gemma 3's sandwich norms: each block's output [max_num_tokens, hidden] fp32, normed before
  // its residual add (rms_norm's delta_weight); empty for every other model.
  cuda::DeviceBuffer branch;
  // Activations for max_num_tokens rows (docs/gpu-engine.md draws the flow).
  cuda::DeviceBuffer residual, normed, qkv, attn, gate_up, act, logits, workspace;
  cuda::DeviceBuffer sampled_tokens, sampled_logprobs;  // [max_num_tokens] each
  // MoE layers (empty without any): the router's fp32 logits [max_num_tokens, E], each token's
  // experts and weights [max_num_tokens, k], and moe_experts_forward's workspace for
  // max_num_tokens tokens (moe_workspace_bytes), all at fixed addresses for the decode graphs.
  cuda::DeviceBuffer moe_logits, moe_experts, moe_weights, moe_workspace;
  // MLA (DeepSeek, cuda_model_mla.cc; empty otherwise), for max_num_tokens rows: the queries
  // [t, heads * qk_head_dim] bf16, q LoRA's product [t, q_lora_rank] fp32 and normed bf16,
  // kv_a's product [t, 576] fp32, the absorbed queries [t, heads, 576] bf16, the attention's
  // latent output [t, heads, 512] bf16 (up-projected into `attn`, [t, heads * v_head_dim]), the
  // decode kernel's split workspace, and the per-row paged layout of a step with prompt rows
  // (mla_gpu.h: int32 kv_indptr [t + 1] | kv_last_page_len [t] | kv_indices [capacity], the
  // capacity max_num_tokens x a longest sequence's blocks; eager steps only) with its view.
  cuda::DeviceBuffer mla_q, mla_q_a, mla_q_a_normed, mla_kv_a, mla_q_latent, mla_o_latent;
  cuda::DeviceBuffer mla_workspace, mla_rows;
  int64_t mla_rows_capacity = 0;
  PagedKvLayout mla_row_view;
  CudaStepInputs inputs;
  cuda::DeviceBuffer pool;
  std::unique_ptr<CudaBlockMover> mover;  // made with the pool
  // INT4 only (some layer is I4): the newest-blocks group's pool -- bf16 blocks of
  // kv::newest_blocks_spec's shape, addressed by the batch's view of that group (its layout and
  // slot mapping) -- its mover, and the prefill kernel's log-sum-exp scratch for max_num_tokens
  // rows. (`residual` above is the activations' residual stream, another thing.)
  std::optional<kv::KvLayout> newest_layout;
  cuda::DeviceBuffer newest_pool;
  std::unique_ptr<CudaBlockMover> newest_mover;
  cuda::DeviceBuffer lse_workspace;

  // The attention's output width (o_proj's input): MLA's heads * v_head_dim.
  int64_t q_width() const {
    return config.num_attention_heads *
           (config.mla.enabled() ? config.mla.v_head_dim : config.head_dim);
  }
  int64_t qkv_width() const {
    return (config.num_attention_heads + 2 * config.num_key_value_heads) * config.head_dim;
  }

  Impl(ModelConfig c, const CudaModelOptions& o, CudaDecoderWeights w, cuda::Stream s,
       cuda::Gemm g)
      : config(std::move(c)),
        options(o),
        layout(pool_spec(config, o), o.block_size, o.kv_scales),
        stream(std::move(s)),
        gemm(std::move(g)),
        weights(std::move(w)) {}

  bool has_newest_blocks_group() const { return kv::needs_newest_blocks_group(layout.spec()); }
  void allocate_scratch();
  // The newest-blocks pool (INT4), then the KV pool from what is left of the budget.
  void allocate_newest_pool();
  // The KV pool from the budget (and first the newest-blocks pool, when the layout needs one and
  // it is not there yet). Throws strata::Error when no room is left.
  void allocate_pool();
  // The decode graphs' fixed inputs for the options' sequences and lengths (none when eager), with
  // room for R + 1 newest-blocks entries per sequence, R = newest_blocks (0 without an int4 layer).
  Status make_graph_inputs(int32_t newest_blocks);
  Status run_layer(int32_t l, const CudaStepInputs::Device& in);
  // Copies layer l's attention output to the capture's host buffer (when one is set for l).
  Status capture_attention(int32_t l, const CudaStepInputs::Device& in);
  // One forward pass of tokens (one sequence, positions 0..n-1, in chunks of max_num_tokens)
  // through a scratch pool of `scratch_layout` (and a scratch newest-blocks pool when it has an
  // int4 layer, its R the options'); the serving pools are untouched. logits, when not empty,
  // gets [n x vocab] (pinned host memory copies fastest); *scratch_pool, when set, the scratch
  // pool after the pass.
  Status calibration_pass(std::span<const int32_t> tokens, const kv::KvLayout& scratch_layout,
                          std::span<float> logits, cuda::DeviceBuffer* scratch_pool);
  // q/k norms and RoPE with the fused KV append; for an INT4 layer the rows go to the
  // newest-blocks pool and the blocks they fill are quantized into the int4 pool after.
  Status rope_and_append(int32_t l, const CudaLayerWeights& w, const CudaStepInputs::Device& in);
  Status run_attention(int32_t l, const CudaStepInputs::Device& in);
  // An MLA layer's attention (cuda_model_mla.cc): normed -> q (LoRA) and kv_a -> latent row
  // into the pool and roped q_pe -> W_UK absorption -> mla_decode over the latent pool (every
  // row its own query, through mla_row_view when the step has prompt rows) -> W_UV -> attn.
  Status run_mla_attention(int32_t l, const CudaStepInputs::Device& in);
  // The MLA scratch above; returns its bytes (0 without MLA).
  int64_t allocate_mla_scratch();
  // A step with prompt rows: builds its per-row layout (build_mla_row_layout) on the host,
  // uploads it into mla_rows and points mla_row_view at it. Decode-only steps need none.
  Status upload_mla_rows(const ForwardBatch& batch);
  // Whole-block copies inside one device pool (copy-on-write), waited for.
  Status copy_pool_blocks(void* pool_data, int64_t block_bytes,
                          std::span<const kv::BlockCopy> copies);
  // w is BF16, or F8E4M3 codes with w_scale its per-output-channel scales (empty otherwise).
  Status gemm_run(const void* a, int64_t lda, const DeviceTensor& w, const DeviceTensor& w_scale,
                  const DeviceTensor& bias, void* d, int64_t ldd, DType d_dtype, bool accumulate,
                  int64_t m, int64_t n, int64_t k);
  Status norm(const DeviceTensor& weight, const int32_t* rows, int32_t num_rows);
  // Gemma 3: residual += rmsnorm(branch) * branch_weight, then normed = rmsnorm(residual) *
  // weight, over num_rows rows (rms_norm's delta_weight).
  Status sandwich_add_norm(const DeviceTensor& branch_weight, const DeviceTensor& weight,
                           int32_t num_rows);
  // The MLP: normed -> act (SwiGLU fused in the GEMM's epilogue, or GeGLU's gelu_tanh after a
  // plain GEMM) -> down_proj into d (fp32, accumulated into it when accumulate).
  Status run_mlp(const CudaLayerWeights& w, int64_t t, float* d, bool accumulate);
  // An MoE layer's MLP (cuda_model.cc): router GEMM -> moe_route -> moe_experts_forward
  // (permute, gate | up with SiLU-and-mul, down, combine into d) -> the shared experts' dense
  // MLP added to d when the layer has one. No host sync: capturable into the decode graphs.
  Status run_moe(const CudaLayerWeights& w, int64_t t, float* d, bool accumulate);
  // The dense SwiGLU / GeGLU MLP of w.gate_up and w.down_proj (an MoE layer's shared experts).
  Status run_dense_mlp(const CudaLayerWeights& w, int64_t t, float* d, bool accumulate);
  // The MoE scratch above, sized for max_num_tokens; returns its bytes (0 without MoE layers).
  int64_t allocate_moe_scratch();
  // Layer l's RoPE (its window's table: Gemma 3's sliding layers have their own).
  bool sliding_rope_layer(int32_t l) const {
    return config.sliding_rope && config.layer_sliding_window[static_cast<size_t>(l)] > 0;
  }
  float attention_scale() const;
  // Final norm, LM head, and then either a copy to the host (logits rows) or the sampling
  // kernel (sample rows, into sampled_tokens / sampled_logprobs), kLogitsChunk rows at a time so
  // the logits buffer stays small.
  Status head(const CudaStepInputs::Device& in, std::span<float> host_logits);
  // Copies the first sampled.size() drawn tokens out and waits for the step.
  Status collect_samples(std::span<SampledToken> sampled);
  // Embedding, every layer, head: one step's launches (captured as they are into graphs).
  Status run_body(const CudaStepInputs::Device& in, std::span<float> host_logits);
  // A decode step through a CUDA graph of its (padded batch, KV bound) shape.
  Status run_graph(const ForwardBatch& batch, std::span<SampledToken> sampled);
  // A decode graph's shape: padded batch, KV bound, and whether rows are masked (structured
  // outputs), which adds the masking launch.
  struct GraphKey {
    int32_t padded = 0;
    int32_t kv_bound = 0;
    bool masked = false;
    auto operator<=>(const GraphKey&) const = default;
  };
  Status capture(GraphKey key, const CudaStepInputs::Device& in);

  CudaStepInputs graph_inputs;  // fixed addresses; empty with enforce_eager
  std::map<GraphKey, GraphExec> graphs;
  // Samples rows [first, first + count) of the sample rows from chunk_logits, masking the
  // structured outputs' rows there first (in place).
  Status sample_rows(const CudaStepInputs::Device& in, int32_t first, int32_t count,
                     float* chunk_logits);
  // Pinned, so the two copies of a step's draws are asynchronous and one wait covers both.
  cuda::PinnedArray<int32_t> host_tokens;  // [max_num_tokens]
  cuda::PinnedArray<float> host_logprobs;  // [max_num_tokens]
  // A step's masked rows wait for their masks (cuda::wait_host_signal) on mask_signal, which
  // mask_thread sets once it has made them (ForwardBatch::fill_masks) during the forward pass.
  cuda::PinnedArray<uint32_t> mask_signal;  // [2]
  std::unique_ptr<MaskThread> mask_thread;
  // Hands the uploaded step's mask_later rows to mask_thread (or signals at once without any).
  void start_masks(const ForwardBatch& batch, const CudaStepInputs& uploaded_from);
  AttentionCapture* attention_capture = nullptr;  // set during a calibration pass only
  bool stepped = false;  // forward() has run: the pool holds sequences' K/V
};

}  // namespace strata::model

#pragma once
// A Llama-family decoder's weights in GPU memory, arranged for the GPU step (docs/gpu-engine.md):
// q, k and v projections are fused into one [ (q_heads + 2 kv_heads) * head_dim, hidden ] matrix
// and gate and up into one [2 * intermediate, hidden] matrix, so a layer runs four GEMMs. Matrices
// and biases are BF16 (a checkpoint in F32 or F16 is rounded once at load); norm weights keep the
// checkpoint's dtype (the norm kernels read F32, BF16 and F16), except Gemma 3's (1 + weight)
// norms, uploaded as 1 + weight in F32 (ModelConfig::norm_unit_offset). With FP8 weights
// (quantize_weights_fp8) the four matrices of each layer hold e4m3 codes beside one fp32 scale
// per output channel (row); the embedding and the LM head stay BF16.
//
// MLA layers (DeepSeek-V2 / V3) hold their projections apart (CudaLayerWeights' MLA fields) and
// W_UK transposed per head for the absorbed query; qkv stays empty.
//
// MoE layers (ModelConfig::moe, Mixtral / Qwen3-MoE): the router [E, hidden] and the experts
// packed as the MoE kernels take them (kernels/cuda/moe.h): gate | up [E, 2 moe_inter, hidden]
// (each expert's gate_proj rows, then its up_proj rows) and down [E, hidden, moe_inter], all BF16;
// the dense gate_up / down_proj then hold the shared experts' MLP (DeepSeek) or stay empty. FP8
// weights leave the router and the experts in BF16.
//
// Owns one device allocation per tensor; move-only. Cost of loading: every byte of the checkpoint
// crosses PCIe once; dummy weights are generated on the device (no host copy at all), so an 8B
// shape loads in seconds.

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/device_buffer.h"
#include "model/hf_config.h"
#include "model/weight_store.h"

namespace strata::model {

struct DeviceTensor {
  cuda::DeviceBuffer buffer;
  DType dtype = DType::kBF16;
  int64_t numel = 0;

  const void* data() const { return buffer.data(); }
  bool empty() const { return buffer.empty(); }
  int64_t bytes() const { return numel * dtype_size(dtype); }
};

struct CudaLayerWeights {
  DeviceTensor input_norm, post_attention_norm;  // [hidden]
  // [hidden] F32 or empty: Gemma 3's norms of the attention's and the MLP's outputs before their
  // residual adds (LayerWeights::attn_output_norm, mlp_output_norm), 1 + weight.
  DeviceTensor attn_output_norm, mlp_output_norm;
  DeviceTensor qkv, qkv_bias;                    // [(q_heads + 2 kv_heads) * head_dim, hidden], [..]
  DeviceTensor q_norm, k_norm;                   // [head_dim] (Qwen3) or empty
  DeviceTensor o_proj, o_bias;                   // [hidden, q_heads * head_dim], [hidden]
  DeviceTensor gate_up, gate_up_bias;            // [2 * intermediate, hidden], [2 * intermediate]
  DeviceTensor down_proj, down_bias;             // [hidden, intermediate], [hidden]
  // FP8 weights: each matrix's per-output-channel scales, F32 [rows of the matrix]; else empty.
  DeviceTensor qkv_scale, o_scale, gate_up_scale, down_scale;
  // An MoE layer's (else empty): router [E, hidden] BF16, experts_gate_up [E, 2 moe_inter, hidden]
  // BF16, experts_down [E, hidden, moe_inter] BF16, score_bias [E] F32 (DeepSeek-V3) or empty.
  DeviceTensor router, experts_gate_up, experts_down, score_bias;
  // An MLA layer's (DeepSeek, else empty), BF16 but the two latent norms' F32 weights: q_proj
  // [heads * qk_head_dim, hidden], or q_a_proj [q_lora_rank, hidden], q_a_norm [q_lora_rank] and
  // q_b_proj [heads * qk_head_dim, q_lora_rank]; kv_a_proj [576, hidden], kv_a_norm [512];
  // kv_b_proj [heads * (qk_nope + v_head_dim), 512], whose rows of head h after its first
  // qk_nope are W_UV_h [v_head_dim, 512]; uk_t [heads, 512, qk_nope] = W_UK_h^T per head
  // (mla_uk_transposed), arranged once at load. o_proj is [hidden, heads * v_head_dim].
  DeviceTensor q_proj, q_a_proj, q_a_norm, q_b_proj, kv_a_proj, kv_a_norm, kv_b_proj, uk_t;

  bool is_moe() const { return !router.empty(); }
};

struct CudaDecoderWeights {
  DeviceTensor embed;       // [vocab, hidden] BF16
  DType embed_source_dtype = DType::kBF16;  // the checkpoint's (Gemma 3's embedding scale)
  std::vector<CudaLayerWeights> layers;
  DeviceTensor final_norm;  // [hidden]
  DeviceTensor lm_head;     // [vocab, hidden] BF16; empty when tied (use embed)

  const void* lm_head_data() const { return lm_head.empty() ? embed.data() : lm_head.data(); }
  int64_t bytes() const;
};

// Uploads the checkpoint's tensors (bound and shape-checked as for the CPU model: throws
// strata::Error naming a missing or misshapen tensor). CUDA failures (out of memory) return Status.
Result<CudaDecoderWeights> upload_weights(const ModelConfig& config, const WeightStore& store);

// Replaces each layer's four matrices by e4m3 codes and per-output-channel scales
// (fp8_quantize_rows on the device, one matrix at a time, so the peak is the bf16 weights plus one
// fp8 matrix). Throws strata::Error when a matrix's row length is not a multiple of 16 (the FP8
// products need it); CUDA failures return Status.
Status quantize_weights_fp8(CudaDecoderWeights& weights);

// Seeded random weights of the config's shapes, generated on the device: matrices uniform in
// [-0.02, 0.02], norm weights in [0.9, 1.1] (activations stay in range over many layers; for
// Gemma 3 these are the uploaded 1 + weight).
Result<CudaDecoderWeights> dummy_weights(const ModelConfig& config, uint64_t seed);

}  // namespace strata::model

#pragma once
// The per-token part of a DeepSeek MLA layer around the latent cache (docs/gpu-engine.md,
// "DeepSeek"): one launch that finishes the latent row of each step token and its queries' rope
// part, as the CPU engine's mla_project does (src/model/model_mla.cc).
//
//   kv_a[t]    = [c_kv (kv_lora_rank 512) | k_pe (64)], fp32 (kv_a_proj_with_mqa's product)
//   latent row = [rmsnorm(c_kv) * kv_norm, rope(k_pe)], bf16 -> the pool at slot_mapping[t]
//   q[t, h]    = [q_nope (nope) | q_pe (64)], bf16 -> q_latent[t, h, 512:576] = rope(q_pe), bf16
//
// RoPE pairs channels (2i, 2i + 1) (DeepSeek's interleaved layout) or (i, i + 32) (rotate_half),
// with angle position * inv_freq[i] in float64 and cos / sin times attention_scaling (YaRN's
// factor), as the CPU forms them. The norm's epsilon is the caller's (transformers builds
// kv_a_layernorm with RMSNorm's default 1e-6). Each value is rounded to bf16 once.
// q_latent's first 512 channels (the absorbed q_nope) are not touched. One thread block per token.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/paged_kv.h"
#include "core/status.h"

namespace strata::cuda {

inline constexpr int32_t kMlaRopeDim = 64;  // qk_rope_head_dim the kernels take

struct MlaRopeAppendParams {
  const float* kv_a = nullptr;  // [num_tokens, 576] fp32, row stride kv_a_stride
  int64_t kv_a_stride = 0;
  const float* kv_norm = nullptr;  // [512] fp32: kv_a_layernorm's weight
  float eps = 1e-6f;
  const void* q = nullptr;  // [num_tokens, num_heads, q_head_dim] bf16, row stride q_stride
  int64_t q_stride = 0;
  int32_t q_head_dim = 0;    // qk_nope_head_dim + 64; q_pe is each head's last 64
  void* q_latent = nullptr;  // [num_tokens, num_heads, 576] bf16, row stride q_latent_stride
  int64_t q_latent_stride = 0;
  int32_t num_heads = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [32]
  float attention_scaling = 1.0f;
  bool interleave = true;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; a negative slot writes no row
  PagedKvCacheView cache;                 // one layer's latent: bf16, 1 head, head_dim 576
  int32_t num_tokens = 0;
};

// InvalidArgument for a cache that is not a bf16 latent of 576 or missing pointers. Asynchronous
// on stream.
Status mla_rope_append(const MlaRopeAppendParams& params, cudaStream_t stream);

}  // namespace strata::cuda

#pragma once
// The decoder's non-attention operations on the GPU, as the CUDA model runner calls them each
// step (docs/gpu-engine.md). Activations flow as:
//
//   residual  fp32 [num_tokens, hidden]      the running hidden state (kept in fp32)
//   normed    bf16 [num_tokens, hidden]      RMSNorm output, the next GEMM's input
//   qkv       bf16 [num_tokens, (q_heads + 2 * kv_heads) * head_dim]   q | k | v per token
//   gate_up   bf16 [num_tokens, 2 * intermediate]                      gate | up per token
//   act       bf16 [num_tokens, intermediate]
//
// Every launcher validates its parameters on the host (InvalidArgument for a null pointer, a
// negative count, a non-positive width or a stride smaller than a row; Unsupported for a dtype
// it does not take), enqueues on `stream` and returns without synchronizing. A count of zero
// (num_tokens, num_rows, n) is an OK no-op, so a step that wants no logits needs no special case.
// Device-side values (token ids, positions, row indices) are trusted: the runner validates them
// on the host first. Pointers need only their element's alignment; 16-byte aligned pointers and
// row widths that are multiples of 8 take the vectorized paths (docs/gpu-engine.md).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "core/status.h"

namespace strata::cuda {

// out[t, :] = float(table[token_ids[t], :]) * scale.
struct EmbeddingParams {
  const int32_t* token_ids = nullptr;  // [num_tokens] device, each in [0, vocab_size)
  const void* table = nullptr;         // [vocab_size, hidden], table_dtype (BF16 or F16)
  DType table_dtype = DType::kBF16;
  float* out = nullptr;  // [num_tokens, hidden] fp32
  int32_t num_tokens = 0;
  int32_t hidden = 0;
  float scale = 1.0f;  // Gemma 3: sqrt(hidden_size) in the checkpoint's dtype; else 1 (exact)
};
Status embedding(const EmbeddingParams& params, cudaStream_t stream);

// For each output row r (source row i = rows ? rows[r] : r):
//   if delta: residual[i, :] += delta[r...]   (delta is [num_rows, hidden] fp32, row-aligned
//                                              with residual when rows == nullptr)
//     or, with delta_weight (Gemma 3's post-attention / post-feedforward norms):
//             residual[i, :] += (delta[r, :] * rsqrt(mean(delta[r, :]^2) + eps)) * delta_weight
//   out[r, :] = bf16(residual[i, :] * rsqrt(mean(residual[i, :]^2) + eps) * weight)
// The sum of squares is reduced in fp32 in a fixed order per row (no atomics), so a row's
// result does not depend on the number of rows. `rows` gathers the rows to normalize (the
// final norm of the rows whose logits are wanted); with rows set, delta must be null.
// hidden <= 65536 (Unsupported beyond; 8192 when the vector path does not apply). out must not
// overlap residual or delta.
struct RmsNormParams {
  float* residual = nullptr;     // [num_residual_rows, hidden] fp32 (updated in place by delta)
  const float* delta = nullptr;  // nullable, [num_rows, hidden] fp32
  // nullable (needs delta), [hidden] fp32; hidden <= 8192 (Unsupported beyond)
  const float* delta_weight = nullptr;
  const void* weight = nullptr;  // [hidden], weight_dtype (BF16, F16 or F32)
  DType weight_dtype = DType::kBF16;
  const int32_t* rows = nullptr;  // nullable, [num_rows] device row indices into residual
  void* out = nullptr;            // [num_rows, hidden] bf16
  int32_t num_rows = 0;
  int32_t hidden = 0;
  float eps = 1e-6f;
};
Status rms_norm(const RmsNormParams& params, cudaStream_t stream);

// In place on the q and k heads of a fused qkv buffer (bf16), per token t and head h:
//   if q_norm / k_norm (Qwen3): x = rmsnorm(x) * norm_weight over head_dim (fp32 math)
//   then rotary embedding, Hugging Face's rotate_half convention (pairs (i, i + head_dim / 2)):
//     angle_i = positions[t] * inv_freq[i],  i < head_dim / 2
// inv_freq already holds any RoPE frequency scaling (default, linear, llama3, yarn, ...): the host
// computes it once (src/model/rope.h) and uploads it; yarn / longrope's attention_scaling, which
// multiplies cos and sin rather than the frequencies, is its own field. The angle
// position * inv_freq is formed and reduced to [-pi, pi] in float64 (as the CPU backend forms it,
// src/kernels/cpu/rope.h), so long positions keep their accuracy; cos / sin are fp32 (absolute
// error <= 2^-21.4), the norm and rotation fp32, and each element is rounded to bf16 once. v
// heads are not touched.
struct QkNormRopeParams {
  void* qkv = nullptr;       // [num_tokens, token_stride] bf16; q heads first, then k
  int64_t token_stride = 0;  // elements between tokens (>= (q_heads + 2 kv_heads) * head_dim)
  const int32_t* positions = nullptr;  // [num_tokens] device
  const float* inv_freq = nullptr;     // [head_dim / 2] device
  const void* q_norm = nullptr;        // nullable, [head_dim], norm_dtype
  const void* k_norm = nullptr;        // nullable, [head_dim], norm_dtype
  DType norm_dtype = DType::kBF16;     // BF16, F16 or F32
  float eps = 1e-6f;
  float attention_scaling = 1.0f;  // multiplies cos and sin (1 except for yarn / longrope)
  int32_t num_tokens = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // even, <= 256
  // Optional fused KV append: with slot_mapping set, the rotated K heads and the V heads (after
  // k in each qkv row) are also written to `cache` at slot_mapping[t] (-1 skips the token), bit
  // for bit as kv_append() writes them (a bf16 copy, or FP8 / INT8 codes of the bf16 values):
  // one launch instead of two where the shapes allow (16-byte vectors), else the two launches.
  // The cache checks are kv_append()'s.
  const int64_t* slot_mapping = nullptr;  // [num_tokens] device
  PagedKvCacheView cache;
};
Status qk_norm_rope(const QkNormRopeParams& params, cudaStream_t stream);

// out[t, i] = bf16(silu(float(gate_up[t, i])) * float(gate_up[t, intermediate + i])).
struct SiluAndMulParams {
  const void* gate_up = nullptr;  // [num_tokens, 2 * intermediate] bf16
  void* out = nullptr;            // [num_tokens, intermediate] bf16
  int32_t num_tokens = 0;
  int32_t intermediate = 0;
};
Status silu_and_mul(const SiluAndMulParams& params, cudaStream_t stream);

// The same with GeGLU's tanh-approximated GELU (Gemma 3's gelu_pytorch_tanh):
//   out[t, i] = bf16(gelu_tanh(float(gate_up[t, i])) * float(gate_up[t, intermediate + i])),
//   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
Status gelu_tanh_and_mul(const SiluAndMulParams& params, cudaStream_t stream);

// logits[i] = cap * tanh(logits[i] / cap) for n fp32 values in place (Gemma's
// final_logit_softcapping); cap > 0.
Status logit_softcap(float* logits, int64_t n, float cap, cudaStream_t stream);

// Element-wise conversion of n fp32 values to bf16 (round to nearest even), e.g. weights at load.
Status f32_to_bf16(const float* in, void* out, int64_t n, cudaStream_t stream);

}  // namespace strata::cuda

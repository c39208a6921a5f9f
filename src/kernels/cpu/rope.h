#pragma once
// Rotary position embedding on the CPU, Hugging Face "rotate_half" (GPT-NeoX) layout: channel i is
// paired with channel i + head_dim / 2. For each token t, head and i in [0, head_dim / 2):
//   angle = position[t] * inv_freq[i]           (float64)
//   c = cos(angle) * attention_scaling, s = sin(angle) * attention_scaling  (float64, then fp32)
//   x[i]            <- x[i] * c - x[i + half] * s          (fp32)
//   x[i + half]     <- x[i + half] * c + x[i] * s
// which is q * cos + rotate_half(q) * sin. The model computes inv_freq, including llama3 / linear /
// dynamic scaling, so this kernel knows no rope type.
//
// Determinism: each token is rotated on its own; its angles depend only on its position. Cost:
// head_dim / 2 cos/sin pairs per token plus 6 flops per channel pair and head; tokens are split
// over the ThreadPool.

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"

namespace strata::cpu {

struct RopeParams {
  float* q = nullptr;  // [num_tokens, num_q_heads, head_dim], rotated in place
  float* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], rotated in place; must not overlap q
  const int32_t* positions = nullptr;  // [num_tokens], the token positions in their sequences
  const float* inv_freq = nullptr;     // [head_dim / 2]
  int64_t num_tokens = 0;              // >= 0
  int32_t num_q_heads = 0;             // > 0
  int32_t num_kv_heads = 0;            // > 0
  int32_t head_dim = 0;                // positive and even
  // Multiplies cos and sin (Hugging Face's attention_scaling: 1 except for yarn / longrope).
  float attention_scaling = 1.0f;
};

// Errors (nothing is written): InvalidArgument for null pointers, non-positive head counts, or a
// head_dim that is not positive and even.
Status apply_rope(const RopeParams& params, ThreadPool& pool);

}  // namespace strata::cpu

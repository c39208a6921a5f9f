#pragma once
// Element-wise kernels of the forward pass on the CPU (fp32): SwiGLU's silu_and_mul, GeGLU's
// gelu_tanh_and_mul, the residual add, and the embedding gather (with an optional scale). All are
// deterministic per element (no reductions) and split over the ThreadPool in contiguous ranges.

#include <cstdint>

#include "core/status.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace strata::cpu {

// SwiGLU with gate and up in SEPARATE buffers (the outputs of gate_proj and up_proj; a fused
// [rows, 2 * intermediate] layout is not what this takes):
//   out[i] = silu(gate[i]) * up[i],  silu(g) = g / (1 + exp(-g)),  for i in [0, n)
// gate, up, out: [n] fp32 (e.g. [num_tokens, intermediate] flattened). out may equal gate or up
// (in place) but must not otherwise overlap them. n >= 0.
// Errors: InvalidArgument for null pointers (when n > 0) or negative n.
Status silu_and_mul(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool);

// GeGLU with the tanh-approximated GELU (PyTorch's gelu(approximate="tanh"), transformers'
// gelu_pytorch_tanh), gate and up in separate buffers as for silu_and_mul:
//   out[i] = gelu(gate[i]) * up[i],  gelu(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3)))
// gelu(g) is computed in float64 and rounded to fp32 before the product. Same contract and
// errors as silu_and_mul.
Status gelu_tanh_and_mul(const float* gate, const float* up, float* out, int64_t n,
                         ThreadPool& pool);

// The residual add, in place: dst[i] += src[i] for i in [0, n). dst and src: [n] fp32, either equal
// (dst doubles) or not overlapping. Errors: InvalidArgument for null pointers or negative n.
Status add_inplace(float* dst, const float* src, int64_t n, ThreadPool& pool);

struct EmbeddingParams {
  const int32_t* token_ids = nullptr;  // [num_tokens], each in [0, vocab)
  int64_t num_tokens = 0;              // >= 0
  TensorView table;                    // [vocab, hidden], rank 2, F32, BF16 or F16
  float* out = nullptr;                // [num_tokens, hidden] fp32; must not overlap the table
  float scale = 1.0f;                  // multiplies every element (Gemma's sqrt(hidden))
};

// out[t, :] = table[token_ids[t], :] widened to fp32, times scale (in fp32) unless it is 1. Errors
// (nothing is written): OutOfRange for a token id outside [0, vocab); InvalidArgument for null
// pointers or a table that is not rank 2; Unsupported for a table dtype outside F32/BF16/F16.
Status embedding(const EmbeddingParams& params, ThreadPool& pool);

}  // namespace strata::cpu

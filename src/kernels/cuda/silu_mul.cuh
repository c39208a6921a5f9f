#pragma once
// The gated MLP's activation of one element, act = bf16(silu(gate) * up), in the one form both of
// its kernels use: silu_and_mul() (activation.cu) and the small-batch GEMV's SiLU-and-mul
// epilogue (gemv.cu), which must give the same bits. Internal (.cuh).
//
// silu(g) = g / (1 + exp(-g)) in fp32 with the fast exponential (__expf: ex2.approx), an IEEE
// division, the product with up rounded to bf16 once (round to nearest even). Every operation is
// rounded on its own (none of them can be contracted into an FMA: the add takes ex2's result and
// the product feeds the conversion), so the bits depend only on (gate, up).

#include <cuda_bf16.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

// silu(gate) * up in fp32, before its rounding to bf16.
__device__ __forceinline__ float silu_mul(float gate, float up) { return silu(gate) * up; }

// One element, rounded to bf16.
__device__ __forceinline__ __nv_bfloat16 silu_mul_bf16(float gate, float up) {
  return __float2bfloat16_rn(silu_mul(gate, up));
}

// 8 elements (two 16-byte vectors of bf16 in, one out); element e is silu_mul_bf16(gate[e], up[e])
// (pack8 rounds to nearest even, as __float2bfloat16_rn does).
__device__ __forceinline__ uint4 silu_mul8_bf16(const uint4& gate, const uint4& up) {
  float g[8];
  float u[8];
  float y[8];
  unpack8<DType::kBF16>(gate, g);
  unpack8<DType::kBF16>(up, u);
#pragma unroll
  for (int e = 0; e < 8; ++e) y[e] = silu_mul(g[e], u[e]);
  return pack8<DType::kBF16>(y);
}

}  // namespace strata::cuda::detail

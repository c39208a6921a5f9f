#pragma once
// Internal to Gemm (gemm.cc): the matrix-vector kernel for the products of a few rows (decode
// steps of small batches), where cuBLASLt's tiles leave bandwidth unused and its split-k adds a
// reduction launch. Host-only header; docs/gpu-engine.md, "Small-batch projections".
//
//   d[i, j] = sum_k a[i, k] * w[j, k]  (+ bias[j])  (+ d[i, j] when accumulate),  i < m <= 8
//
// A block of 256 threads takes 4 output features and splits k between its threads: each streams
// its 16-byte columns of the 4 weight rows once (L1 bypassed, 8 loads in flight) and dots them
// with the same columns of every row of a (read once per column through L1, shared by the 4
// features), in fp32. The partial sums meet in a fixed order (a shuffle tree per warp, then the
// warps in turn), so d[i, j] does not depend on m or on the other rows: the same bits in any
// batch of up to kGemvMaxRows rows. bias and the accumulated d are added in fp32 and the output
// rounded once.
//
// FP8 weights (w_fp8): w holds e4m3 codes with one fp32 scale per output feature (w_scale, from
// fp8_quantize_rows), and d[i, j] = w_scale[j] * sum_k a[i, k] * code[j, k]: each thread streams
// 16-byte columns of 16 codes (half the bytes of bf16's 8 weights) and converts them exactly to
// fp16 pairs, then fp32; the activations stay bf16 (no activation rounding on this path). Its
// block shape (features and threads per block) is a GemvFp8Shape.
//
// SiLU-and-mul epilogue (silu_and_mul): the product is the gated MLP's gate | up (n = 2 * inter,
// w's rows gate then up, bias likewise) and d receives act[i, j] = silu_mul_bf16(gate, up) for
// j < inter (silu_mul.cuh, the function silu_and_mul() applies), where gate and up are d[i, j] and
// d[i, inter + j] of the plain product rounded to bf16: the bits of gemv() then silu_and_mul(),
// one launch and no gate | up round trip. A block then takes the gate features j, j + 1, ... and
// the up features inter + j, ... of the same pairs (half its rows each); each feature's sum is
// formed exactly as in the plain product (the order depends only on the block's thread count).
// d is BF16 [m, inter], no accumulate.
//
// Launched with programmatic dependent launch: a block loads its first weights before waiting
// for the previous kernel (weights are never written during a step), and lets the next kernel
// launch at once. The contract that follows: w must not be written by the kernel before on the
// stream (a and d may be: they are touched only after the wait).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::cuda::detail {

inline constexpr int64_t kGemvMaxRows = 8;

// The FP8 kernel's block shape: output features per block and threads per block (each thread
// keeps rows x 2 16-byte loads in flight). The first is the default for every m; the others are
// built for m <= 2 (the decode products) so that strata_model_ops_bench can sweep them.
struct GemvFp8Shape {
  int32_t rows = 0;
  int32_t threads = 0;
};
inline constexpr GemvFp8Shape kGemvFp8Shapes[] = {{4, 256}, {8, 256}, {8, 128}, {16, 128}, {2, 256}};

struct GemvParams {
  const void* a = nullptr;  // [m, k] bf16, row stride lda (a multiple of 8)
  int64_t lda = 0;
  const void* w = nullptr;  // [n, k] bf16 (row stride ldw, a multiple of 8) or, with w_fp8,
  int64_t ldw = 0;          // e4m3 codes (row stride ldw bytes, a multiple of 16)
  bool w_fp8 = false;
  const float* w_scale = nullptr;  // w_fp8: [n] fp32, w[j, :] = code[j, :] * w_scale[j]
  const void* bias = nullptr;  // nullable, [n] bf16
  void* d = nullptr;           // [m, n] BF16 or F32, row stride ldd
  int64_t ldd = 0;
  DType d_dtype = DType::kBF16;
  bool accumulate = false;
  int64_t m = 0, n = 0, k = 0;
  GemvFp8Shape fp8_shape;  // {0, 0} = kGemvFp8Shapes[0]; another of them only for m <= 2
  // d = silu(gate) * up of the product gate | up (above): n even, d [m, n / 2] BF16, no
  // accumulate.
  bool silu_and_mul = false;
};

// Whether gemv() takes these sizes: 1 <= m <= kGemvMaxRows, k a multiple of 8 (16-byte loads;
// 16 for FP8 weights), n and k below 2^31.
bool gemv_fits(int64_t m, int64_t n, int64_t k, bool w_fp8 = false);
// Asynchronous on stream; the caller has validated pointers, strides and alignment (Gemm::run).
// InvalidArgument for sizes gemv_fits refuses, FP8 without scales, an unknown FP8 block shape, and
// a SiLU-and-mul epilogue with an odd n, a non-BF16 d or accumulate.
Status gemv(const GemvParams& params, cudaStream_t stream);

}  // namespace strata::cuda::detail

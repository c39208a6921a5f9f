#pragma once
// FP8 (E4M3) row quantization for the FP8-weight products (gemm.h, docs/gpu-engine.md "FP8
// weights"): each row of a bf16 matrix becomes e4m3 codes and one fp32 scale,
//
//   scale[i] = max_j |x[i, j]| / 448,   code[i, j] = e4m3(x[i, j] / scale[i])  (round to nearest,
//                                                                              saturated)
//
// so x[i, j] ~= code[i, j] * scale[i]. A weight matrix [out_features, in_features] quantized by
// rows has one scale per output channel (done once at load); an activation matrix [tokens,
// features] one per token (done before each FP8 product). A row of zeros gets the scale of the
// smallest amax (kMinAmax / 448) and zero codes. Host-only header.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::cuda {

inline constexpr float kFp8MinAmax = 1e-12f;  // floor of a row's amax: no division by zero

struct Fp8QuantizeRowsParams {
  const void* in = nullptr;  // [rows, cols] bf16, row stride ld_in elements
  int64_t ld_in = 0;
  void* out = nullptr;  // [rows, cols] e4m3 codes, row stride ld_out bytes
  int64_t ld_out = 0;
  float* scales = nullptr;  // [rows] fp32
  int64_t rows = 0;
  int64_t cols = 0;
};

// One block per row. cols and ld_out multiples of 16, ld_in of 8, in and out 16-byte aligned
// (InvalidArgument otherwise); rows = 0 is an OK no-op. Asynchronous on stream.
Status fp8_quantize_rows(const Fp8QuantizeRowsParams& params, cudaStream_t stream);

}  // namespace strata::cuda

#pragma once
// Internal to Gemm (gemm.cc): the bias add for the shapes whose bias cuBLASLt's epilogue does not
// take (a bf16 bias on an fp32 output). Host-only header.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace strata::cuda::detail {

struct AddBiasParams {
  float* d = nullptr;  // [m, n] fp32, row stride ldd elements; d[i, j] += bias[j]
  int64_t ldd = 0;
  const void* bias = nullptr;  // [n] bf16
  int64_t m = 0;
  int64_t n = 0;
};
Status add_bias_f32(const AddBiasParams& params, cudaStream_t stream);

}  // namespace strata::cuda::detail

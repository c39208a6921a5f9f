#pragma once
// Internal to Gemm (gemm.cc): the bias add for the shapes whose bias cuBLASLt's epilogue does not
// take (a bf16 bias on an fp32 output; FP8 products without a bias epilogue), and the finish of
// an FP8 product that cuBLASLt wrote to a scratch (scales, bias, the add into d). Host-only
// header.

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

struct AddBiasBf16Params {
  void* d = nullptr;  // [m, n] bf16, row stride ldd elements; d[i, j] = bf16(d[i, j] + bias[j])
  int64_t ldd = 0;
  const void* bias = nullptr;  // [n] bf16
  int64_t m = 0;
  int64_t n = 0;
};
Status add_bias_bf16(const AddBiasBf16Params& params, cudaStream_t stream);

// An FP8 product that cuBLASLt wrote to a scratch (fp32 or bf16), finished into d:
//   d[i, j] = (accumulate ? d[i, j] : 0) + a_scale[i] * w_scale[j] * product[i, j] + bias[j]
// in fp32, rounded once for a bf16 d (a null scale or bias counts as 1 or 0).
struct FinishProductParams {
  void* d = nullptr;  // [m, n] fp32 or bf16 (d_f32), row stride ldd
  int64_t ldd = 0;
  bool d_f32 = true;
  const void* product = nullptr;  // [m, n] fp32 or bf16 (product_f32), row stride ldp
  int64_t ldp = 0;
  bool product_f32 = false;
  const float* a_scale = nullptr;  // nullable, [m]
  const float* w_scale = nullptr;  // nullable, [n]
  const void* bias = nullptr;      // nullable, [n] bf16
  bool accumulate = false;
  int64_t m = 0;
  int64_t n = 0;
};
Status finish_product(const FinishProductParams& params, cudaStream_t stream);

}  // namespace strata::cuda::detail

// add_bias_f32(): d[i, :] += float(bias) for the fp32 outputs whose bias Gemm adds itself.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_bias.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// Grid: x over the columns of a row, y strides over rows; one element per thread.
__global__ void __launch_bounds__(kThreads)
    add_bias_kernel(const __grid_constant__ AddBiasParams p) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= p.n) return;
  const float b = __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[j]);
  for (int64_t i = blockIdx.y; i < p.m; i += gridDim.y) p.d[i * p.ldd + j] += b;
}

__global__ void __launch_bounds__(kThreads)
    add_bias_bf16_kernel(const __grid_constant__ AddBiasBf16Params p) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= p.n) return;
  const float b = __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[j]);
  auto* d = static_cast<__nv_bfloat16*>(p.d);
  for (int64_t i = blockIdx.y; i < p.m; i += gridDim.y) {
    d[i * p.ldd + j] = __float2bfloat16_rn(__bfloat162float(d[i * p.ldd + j]) + b);
  }
}

__global__ void __launch_bounds__(kThreads)
    finish_product_kernel(const __grid_constant__ FinishProductParams p) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= p.n) return;
  const float b =
      p.bias != nullptr ? __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[j]) : 0.0f;
  const float ws = p.w_scale != nullptr ? p.w_scale[j] : 1.0f;
  for (int64_t i = blockIdx.y; i < p.m; i += gridDim.y) {
    const float as = p.a_scale != nullptr ? p.a_scale[i] : 1.0f;
    const int64_t at = i * p.ldp + j;
    const float t = p.product_f32 ? static_cast<const float*>(p.product)[at]
                                  : __bfloat162float(static_cast<const __nv_bfloat16*>(p.product)[at]);
    const float v = as * ws * t + b;
    if (p.d_f32) {
      float* d = static_cast<float*>(p.d) + i * p.ldd + j;
      *d = p.accumulate ? *d + v : v;
    } else {
      __nv_bfloat16* d = static_cast<__nv_bfloat16*>(p.d) + i * p.ldd + j;
      *d = __float2bfloat16_rn(p.accumulate ? __bfloat162float(*d) + v : v);
    }
  }
}

dim3 grid_of(int64_t m, int64_t n) {
  return dim3(static_cast<unsigned>(ceil_div(n, kThreads)),
              static_cast<unsigned>(std::min(m, kMaxGridY)));
}

}  // namespace

Status add_bias_bf16(const AddBiasBf16Params& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return Status::Ok();
  add_bias_bf16_kernel<<<grid_of(p.m, p.n), kThreads, 0, stream>>>(p);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

Status finish_product(const FinishProductParams& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return Status::Ok();
  finish_product_kernel<<<grid_of(p.m, p.n), kThreads, 0, stream>>>(p);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

Status add_bias_f32(const AddBiasParams& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return Status::Ok();
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, kThreads)),
                  static_cast<unsigned>(std::min(p.m, kMaxGridY)));
  add_bias_kernel<<<grid, kThreads, 0, stream>>>(p);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda::detail

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

}  // namespace

Status add_bias_f32(const AddBiasParams& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return Status::Ok();
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, kThreads)),
                  static_cast<unsigned>(std::min(p.m, kMaxGridY)));
  add_bias_kernel<<<grid, kThreads, 0, stream>>>(p);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda::detail

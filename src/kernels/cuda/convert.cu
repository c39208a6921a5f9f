// f32_to_bf16(): element-wise fp32 -> bf16, round to nearest even (model_ops.h).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/model_ops_common.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

// Grid-stride over groups of kVec elements; kVec = 8 reads two 16-byte vectors and writes one.
// The n % kVec tail is converted by the first threads, one element each.
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    f32_to_bf16_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t groups = n / kVec;
  for (int64_t g = first; g < groups; g += stride) {
    float f[kVec];
    if constexpr (kVec == 8) {
      const float4 a = reinterpret_cast<const float4*>(in)[2 * g];
      const float4 b = reinterpret_cast<const float4*>(in)[2 * g + 1];
      f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
      f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
      f[0] = in[g];
    }
    detail::store_bf16_n<kVec>(out, g * kVec, f);
  }
  const int64_t tail = groups * kVec + first;
  if (tail < n) out[tail] = __float2bfloat16_rn(in[tail]);
}

template <int kVec>
void launch(const float* in, void* out, int64_t n, cudaStream_t stream) {
  const int64_t blocks =
      std::clamp<int64_t>(detail::ceil_div(detail::ceil_div(n, kVec), kThreads), 1, kMaxBlocks);
  f32_to_bf16_kernel<kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      in, static_cast<__nv_bfloat16*>(out), n);
}

}  // namespace

Status f32_to_bf16(const float* in, void* out, int64_t n, cudaStream_t stream) {
  if (n < 0) return Status::InvalidArgument("f32_to_bf16 needs n >= 0");
  if (n == 0) return Status::Ok();
  if (in == nullptr || out == nullptr) {
    return Status::InvalidArgument("f32_to_bf16 needs in and out");
  }
  if (detail::aligned_to(in, 16) && detail::aligned_to(out, 16)) {
    launch<8>(in, out, n, stream);
  } else {
    launch<1>(in, out, n, stream);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda

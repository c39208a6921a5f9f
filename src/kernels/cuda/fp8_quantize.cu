// fp8_quantize_rows(): bf16 rows to e4m3 codes and one scale per row (fp8_quantize.h).

#include "kernels/cuda/fp8_quantize.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codes.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 65535;

// A block per row (grid-stride over rows): the row's amax (16-byte loads, a block max), then the
// codes (the row again, now from L1/L2), 16 codes per thread and step, one 16-byte store.
__global__ void __launch_bounds__(kThreads)
    fp8_quantize_rows_kernel(const __grid_constant__ Fp8QuantizeRowsParams p) {
  __shared__ float warp_max[kThreads / 32];
  const int64_t cols16 = p.cols / 16;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const auto* in =
        reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.in) + row * p.ld_in);
    float amax = 0.0f;
    for (int64_t c = threadIdx.x; c < cols16; c += kThreads) {
      float f[2][8];
      detail::unpack8<DType::kBF16>(in[2 * c], f[0]);
      detail::unpack8<DType::kBF16>(in[2 * c + 1], f[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(f[h][e]));
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    }
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = warp_max[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    __syncthreads();  // warp_max is rewritten by the next row
    amax = fmaxf(amax, kFp8MinAmax);
    const float scale = amax / kFp8E4M3Max;
    const float inv = kFp8E4M3Max / amax;
    if (threadIdx.x == 0) p.scales[row] = scale;
    auto* out = reinterpret_cast<uint4*>(static_cast<uint8_t*>(p.out) + row * p.ld_out);
    for (int64_t c = threadIdx.x; c < cols16; c += kThreads) {
      float f[2][8];
      detail::unpack8<DType::kBF16>(in[2 * c], f[0]);
      detail::unpack8<DType::kBF16>(in[2 * c + 1], f[1]);
      uint32_t w[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float* v = &f[q / 2][(q % 2) * 4];
        w[q] = detail::f32x4_to_e4m3x4(v[0] * inv, v[1] * inv, v[2] * inv, v[3] * inv);
      }
      out[c] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

Status fp8_quantize_rows(const Fp8QuantizeRowsParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols <= 0 || p.cols % 16 != 0 || p.ld_in < p.cols || p.ld_out < p.cols ||
      p.ld_in % 8 != 0 || p.ld_out % 16 != 0) {
    return Status::InvalidArgument(
        "fp8_quantize_rows: cols and row strides must be positive multiples of 16");
  }
  if (p.rows == 0) return Status::Ok();
  if (p.in == nullptr || p.out == nullptr || p.scales == nullptr || !aligned16(p.in) ||
      !aligned16(p.out)) {
    return Status::InvalidArgument("fp8_quantize_rows: null or misaligned (16-byte) pointers");
  }
  const auto grid = static_cast<unsigned>(std::min(p.rows, kMaxGrid));
  fp8_quantize_rows_kernel<<<grid, kThreads, 0, stream>>>(p);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda

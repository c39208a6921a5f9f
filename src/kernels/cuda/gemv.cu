// gemv(): the small-batch projection kernel of Gemm (gemv.h).

#include "kernels/cuda/gemv.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {
namespace {

constexpr int kRows = 4;      // output features per block
constexpr int kThreads = 256;  // split over k: thread t takes the 16-byte columns t, t + 256, ...
constexpr int kWarps = kThreads / 32;
constexpr int kPer = 2;  // columns per row and thread in one pass (kRows x kPer loads in flight)

struct GemvArgs {
  const uint4* a;  // rows of 8 bf16 per vector
  int64_t lda8;
  const uint4* w;
  int64_t ldw8;
  const __nv_bfloat16* bias;
  void* d;
  int64_t ldd;
  int32_t n;
  int32_t k8;
  bool accumulate;
};

template <int kM, bool kF32Out>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvArgs a) {
  __shared__ float partial[kWarps][kRows * kM];
  const int32_t t = static_cast<int32_t>(threadIdx.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const uint4* w_row[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {  // rows past n re-read the last one and are not written
    w_row[r] = a.w + (row0 + r < a.n ? row0 + r : a.n - 1) * a.ldw8;
  }
  uint4 wv[kRows][kPer];
  auto load_weights = [&](int32_t base) {
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int32_t c = base + p * kThreads + t;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (c < a.k8) wv[r][p] = load_stream16(w_row[r] + c);
      }
    }
  };
  load_weights(0);  // weights are constant during a step: loaded before the wait
  pdl_launch_dependents();
  pdl_wait();
  float acc[kRows][kM];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[r][m] = 0.0f;
  }
  for (int32_t base = 0;;) {
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int32_t c = base + p * kThreads + t;
      if (c >= a.k8) continue;
      float x[kM][8];
#pragma unroll
      for (int m = 0; m < kM; ++m) unpack8<DType::kBF16>(__ldg(a.a + m * a.lda8 + c), x[m]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float wf[8];
        unpack8<DType::kBF16>(wv[r][p], wf);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][m] = fmaf(wf[e], x[m][e], acc[r][m]);
        }
      }
    }
    base += kPer * kThreads;
    if (base >= a.k8) break;
    load_weights(base);
  }
  // Fixed-order sums: a shuffle tree per warp, then the warps in order.
  const int32_t lane = t & 31;
  const int32_t warp = t >> 5;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) partial[warp][r * kM + m] = v;
    }
  }
  __syncthreads();
  if (t >= kRows * kM) return;
  const int32_t r = t / kM;
  const int32_t m = t % kM;
  const int64_t j = row0 + r;
  if (j >= a.n) return;
  float v = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) v += partial[i][t];
  if (a.bias != nullptr) v += __bfloat162float(a.bias[j]);
  if constexpr (kF32Out) {
    float* out = static_cast<float*>(a.d) + m * a.ldd + j;
    *out = a.accumulate ? *out + v : v;
  } else {
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.d) + m * a.ldd + j;
    *out = __float2bfloat16_rn(a.accumulate ? __bfloat162float(*out) + v : v);
  }
}

template <int kM>
Status launch_rows(const GemvArgs& args, bool f32_out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(args.n, kRows)));
  const cudaError_t e = f32_out ? launch_pdl(gemv_kernel<kM, true>, grid, dim3(kThreads), 0, stream, args)
                                : launch_pdl(gemv_kernel<kM, false>, grid, dim3(kThreads), 0, stream, args);
  STRATA_CUDA_CHECK(e);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace

bool gemv_fits(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && n < (int64_t{1} << 31) &&
         k < (int64_t{1} << 31);
}

Status gemv(const GemvParams& p, cudaStream_t stream) {
  if (!gemv_fits(p.m, p.n, p.k)) {
    return Status::InvalidArgument("gemv: m must be 1.." + std::to_string(kGemvMaxRows) +
                                   " and k a multiple of 8");
  }
  const GemvArgs args{static_cast<const uint4*>(p.a),
                      p.lda / 8,
                      static_cast<const uint4*>(p.w),
                      p.ldw / 8,
                      static_cast<const __nv_bfloat16*>(p.bias),
                      p.d,
                      p.ldd,
                      static_cast<int32_t>(p.n),
                      static_cast<int32_t>(p.k / 8),
                      p.accumulate};
  const bool f32 = p.d_dtype == DType::kF32;
  switch (p.m) {
    case 1: return launch_rows<1>(args, f32, stream);
    case 2: return launch_rows<2>(args, f32, stream);
    case 3: return launch_rows<3>(args, f32, stream);
    case 4: return launch_rows<4>(args, f32, stream);
    case 5: return launch_rows<5>(args, f32, stream);
    case 6: return launch_rows<6>(args, f32, stream);
    case 7: return launch_rows<7>(args, f32, stream);
    default: return launch_rows<8>(args, f32, stream);
  }
}

}  // namespace strata::cuda::detail

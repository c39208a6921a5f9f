// gemv(): the small-batch projection kernel of Gemm (gemv.h).

#include "kernels/cuda/gemv.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codes.cuh"
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
  int64_t ldw8;  // w's row stride in 16-byte vectors (8 bf16 or 16 e4m3 codes)
  const __nv_bfloat16* bias;
  void* d;
  int64_t ldd;
  int32_t n;
  int32_t k8;
  bool accumulate;
  const float* w_scale;  // FP8 weights: per output feature
};

// The sums of the kRows x kM outputs of a block meet in a fixed order (a shuffle tree per warp,
// then the warps in turn); thread r * kM + m then finishes output (row0 + r, m): times the
// feature's scale (FP8), plus bias and the accumulated d in fp32, rounded once.
template <int kR, int kThr, int kM, bool kF32Out, bool kScaled>
__device__ __forceinline__ void gemv_finish(const GemvArgs& a, float (&acc)[kR][kM],
                                            float (&partial)[kThr / 32][kR * kM], int64_t row0) {
  const int32_t t = static_cast<int32_t>(threadIdx.x);
  const int32_t lane = t & 31;
  const int32_t warp = t >> 5;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) partial[warp][r * kM + m] = v;
    }
  }
  __syncthreads();
  if (t >= kR * kM) return;
  const int32_t r = t / kM;
  const int32_t m = t % kM;
  const int64_t j = row0 + r;
  if (j >= a.n) return;
  float v = 0.0f;
#pragma unroll
  for (int i = 0; i < kThr / 32; ++i) v += partial[i][t];
  if constexpr (kScaled) v *= a.w_scale[j];
  if (a.bias != nullptr) v += __bfloat162float(a.bias[j]);
  if constexpr (kF32Out) {
    float* out = static_cast<float*>(a.d) + m * a.ldd + j;
    *out = a.accumulate ? *out + v : v;
  } else {
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.d) + m * a.ldd + j;
    *out = __float2bfloat16_rn(a.accumulate ? __bfloat162float(*out) + v : v);
  }
}

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
  gemv_finish<kRows, kThreads, kM, kF32Out, false>(a, acc, partial, row0);
}

// FP8 weights: a block of kThr threads takes kR output features; thread t the 16-byte columns
// (16 codes) t, t + kThr, ... of its kR weight rows (kR x kPer loads in flight) and the matching
// two 16-byte vectors of each activation row. The codes become fp16 pairs exactly
// (cvt.rn.f16x2.e4m3x2), then fp32; the row's scale multiplies the finished sum.
template <int kR, int kThr, int kM, bool kF32Out>
__global__ void __launch_bounds__(kThr) gemv_fp8_kernel(const __grid_constant__ GemvArgs a) {
  __shared__ float partial[kThr / 32][kR * kM];
  const int32_t t = static_cast<int32_t>(threadIdx.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kR;
  const int32_t k16 = a.k8 / 2;
  const uint4* w_row[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {  // rows past n re-read the last one and are not written
    w_row[r] = a.w + (row0 + r < a.n ? row0 + r : a.n - 1) * a.ldw8;
  }
  uint4 wv[kR][kPer];
  auto load_weights = [&](int32_t base) {
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int32_t c = base + p * kThr + t;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (c < k16) wv[r][p] = load_stream16(w_row[r] + c);
      }
    }
  };
  load_weights(0);  // weights are constant during a step: loaded before the wait
  pdl_launch_dependents();
  pdl_wait();
  float acc[kR][kM];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[r][m] = 0.0f;
  }
  for (int32_t base = 0;;) {
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int32_t c = base + p * kThr + t;
      if (c >= k16) continue;
      float x[kM][16];
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        float lo[8], hi[8];
        unpack8<DType::kBF16>(__ldg(a.a + m * a.lda8 + 2 * c), lo);
        unpack8<DType::kBF16>(__ldg(a.a + m * a.lda8 + 2 * c + 1), hi);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          x[m][e] = lo[e];
          x[m][8 + e] = hi[e];
        }
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const uint32_t words[4] = {wv[r][p].x, wv[r][p].y, wv[r][p].z, wv[r][p].w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t h2[2];
          codes4_to_f16x2<DType::kF8E4M3>(words[q], h2[0], h2[1]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            __half2 hv;
            memcpy(&hv, &h2[h], sizeof(hv));
            const float2 wf = __half22float2(hv);
#pragma unroll
            for (int m = 0; m < kM; ++m) {
              acc[r][m] = fmaf(wf.x, x[m][4 * q + 2 * h], acc[r][m]);
              acc[r][m] = fmaf(wf.y, x[m][4 * q + 2 * h + 1], acc[r][m]);
            }
          }
        }
      }
    }
    base += kPer * kThr;
    if (base >= k16) break;
    load_weights(base);
  }
  gemv_finish<kR, kThr, kM, kF32Out, true>(a, acc, partial, row0);
}

template <int kR, int kThr, int kM>
cudaError_t launch_fp8(const GemvArgs& args, bool f32_out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(args.n, kR)));
  const dim3 block(kThr);
  return f32_out ? launch_pdl(gemv_fp8_kernel<kR, kThr, kM, true>, grid, block, 0, stream, args)
                 : launch_pdl(gemv_fp8_kernel<kR, kThr, kM, false>, grid, block, 0, stream, args);
}

constexpr GemvFp8Shape kFp8Shape = kGemvFp8Shapes[0];

constexpr bool same_shape(GemvFp8Shape a, GemvFp8Shape b) {
  return a.rows == b.rows && a.threads == b.threads;
}

// Another shape of kGemvFp8Shapes (m <= 2; gemv() checked the shape).
template <int kM>
cudaError_t launch_fp8_shape(const GemvArgs& args, bool f32_out, GemvFp8Shape s,
                             cudaStream_t stream) {
  static_assert(kM <= 2);
  static_assert(same_shape(kGemvFp8Shapes[1], {8, 256}) && same_shape(kGemvFp8Shapes[2], {8, 128}) &&
                same_shape(kGemvFp8Shapes[3], {16, 128}) && same_shape(kGemvFp8Shapes[4], {2, 256}));
  if (same_shape(s, kGemvFp8Shapes[1])) return launch_fp8<8, 256, kM>(args, f32_out, stream);
  if (same_shape(s, kGemvFp8Shapes[2])) return launch_fp8<8, 128, kM>(args, f32_out, stream);
  if (same_shape(s, kGemvFp8Shapes[3])) return launch_fp8<16, 128, kM>(args, f32_out, stream);
  if (same_shape(s, kGemvFp8Shapes[4])) return launch_fp8<2, 256, kM>(args, f32_out, stream);
  return launch_fp8<kFp8Shape.rows, kFp8Shape.threads, kM>(args, f32_out, stream);
}

template <int kM>
Status launch_rows(const GemvArgs& args, bool f32_out, bool w_fp8, GemvFp8Shape fp8_shape,
                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(args.n, kRows)));
  const dim3 block(kThreads);
  cudaError_t e;
  if (w_fp8) {
    if constexpr (kM <= 2) {
      e = launch_fp8_shape<kM>(args, f32_out, fp8_shape, stream);
    } else {
      e = launch_fp8<kFp8Shape.rows, kFp8Shape.threads, kM>(args, f32_out, stream);
    }
  } else {
    e = f32_out ? launch_pdl(gemv_kernel<kM, true>, grid, block, 0, stream, args)
                : launch_pdl(gemv_kernel<kM, false>, grid, block, 0, stream, args);
  }
  STRATA_CUDA_CHECK(e);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace

bool gemv_fits(int64_t m, int64_t n, int64_t k, bool w_fp8) {
  return m >= 1 && m <= kGemvMaxRows && k % (w_fp8 ? 16 : 8) == 0 && n < (int64_t{1} << 31) &&
         k < (int64_t{1} << 31);
}

Status gemv(const GemvParams& p, cudaStream_t stream) {
  if (!gemv_fits(p.m, p.n, p.k, p.w_fp8)) {
    return Status::InvalidArgument("gemv: m must be 1.." + std::to_string(kGemvMaxRows) +
                                   " and k a multiple of 8 (16 for FP8 weights)");
  }
  if (p.w_fp8 && p.w_scale == nullptr) {
    return Status::InvalidArgument("gemv: FP8 weights need their scales");
  }
  if (p.fp8_shape.rows != 0 || p.fp8_shape.threads != 0) {
    const bool known = std::any_of(std::begin(kGemvFp8Shapes), std::end(kGemvFp8Shapes),
                                   [&](GemvFp8Shape s) { return same_shape(s, p.fp8_shape); });
    if (!known || (p.m > 2 && !same_shape(p.fp8_shape, kFp8Shape))) {
      return Status::InvalidArgument("gemv: an FP8 block shape of kGemvFp8Shapes (m <= 2)");
    }
  }
  const GemvArgs args{static_cast<const uint4*>(p.a),
                      p.lda / 8,
                      static_cast<const uint4*>(p.w),
                      p.w_fp8 ? p.ldw / 16 : p.ldw / 8,
                      static_cast<const __nv_bfloat16*>(p.bias),
                      p.d,
                      p.ldd,
                      static_cast<int32_t>(p.n),
                      static_cast<int32_t>(p.k / 8),
                      p.accumulate,
                      p.w_scale};
  const bool f32 = p.d_dtype == DType::kF32;
  switch (p.m) {
    case 1: return launch_rows<1>(args, f32, p.w_fp8, p.fp8_shape, stream);
    case 2: return launch_rows<2>(args, f32, p.w_fp8, p.fp8_shape, stream);
    case 3: return launch_rows<3>(args, f32, p.w_fp8, p.fp8_shape, stream);
    case 4: return launch_rows<4>(args, f32, p.w_fp8, p.fp8_shape, stream);
    case 5: return launch_rows<5>(args, f32, p.w_fp8, p.fp8_shape, stream);
    case 6: return launch_rows<6>(args, f32, p.w_fp8, p.fp8_shape, stream);
    case 7: return launch_rows<7>(args, f32, p.w_fp8, p.fp8_shape, stream);
    default: return launch_rows<8>(args, f32, p.w_fp8, p.fp8_shape, stream);
  }
}

}  // namespace strata::cuda::detail

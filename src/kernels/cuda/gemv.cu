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
#include "kernels/cuda/silu_mul.cuh"
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

// What a block writes: the product in bf16 or fp32, or the SiLU-and-mul of its gate | up (bf16).
enum class Out { kBF16, kF32, kSiluMul };

// The output feature (weight row) that row r of this block takes. Plain: features
// blockIdx.x * kR + r. SiLU-and-mul: the block's first kR / 2 rows are the gate features
// j = blockIdx.x * kR / 2 + r, its last kR / 2 the up features inter + j of the same pairs. Rows
// past the end re-read the last valid feature and are not written.
template <int kR, Out kOut>
__device__ __forceinline__ int64_t block_feature(int32_t n, int r) {
  if constexpr (kOut == Out::kSiluMul) {
    static_assert(kR % 2 == 0);
    const int64_t inter = n / 2;
    const int64_t j = static_cast<int64_t>(blockIdx.x) * (kR / 2) + r % (kR / 2);
    const int64_t jc = j < inter ? j : inter - 1;
    return r < kR / 2 ? jc : inter + jc;
  } else {
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kR + r;
    return j < n ? j : n - 1;
  }
}

// The sums of the kR x kM outputs of a block meet in a fixed order (a shuffle tree per warp,
// then the warps in turn); the feature's scale (FP8) and the bias follow in fp32, each rounded on
// its own (__fmul_rn / __fadd_rn: never contracted, so a feature's value is the same function of
// its partial sums in every output kind). Plain: thread r * kM + m finishes output (feature of
// row r, m), plus the accumulated d, rounded once. SiLU-and-mul: thread q * kM + m rounds the gate
// and up sums of pair q to bf16, as the plain product stores them, and writes their activation.
template <int kR, int kThr, int kM, Out kOut, bool kScaled>
__device__ __forceinline__ void gemv_finish(const GemvArgs& a, float (&acc)[kR][kM],
                                            float (&partial)[kThr / 32][kR * kM]) {
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
  auto value = [&](int32_t r, int32_t m, int64_t j) {
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < kThr / 32; ++i) v += partial[i][r * kM + m];
    if constexpr (kScaled) v = __fmul_rn(v, a.w_scale[j]);
    if (a.bias != nullptr) v = __fadd_rn(v, __bfloat162float(a.bias[j]));
    return v;
  };
  if constexpr (kOut == Out::kSiluMul) {
    constexpr int kPairs = kR / 2;
    if (t >= kPairs * kM) return;
    const int32_t q = t / kM;
    const int32_t m = t % kM;
    const int64_t inter = a.n / 2;
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kPairs + q;
    if (j >= inter) return;
    const float gate = __bfloat162float(__float2bfloat16_rn(value(q, m, j)));
    const float up = __bfloat162float(__float2bfloat16_rn(value(kPairs + q, m, inter + j)));
    static_cast<__nv_bfloat16*>(a.d)[m * a.ldd + j] = silu_mul_bf16(gate, up);
  } else {
    if (t >= kR * kM) return;
    const int32_t r = t / kM;
    const int32_t m = t % kM;
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kR + r;
    if (j >= a.n) return;
    const float v = value(r, m, j);
    if constexpr (kOut == Out::kF32) {
      float* out = static_cast<float*>(a.d) + m * a.ldd + j;
      *out = a.accumulate ? *out + v : v;
    } else {
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.d) + m * a.ldd + j;
      *out = __float2bfloat16_rn(a.accumulate ? __bfloat162float(*out) + v : v);
    }
  }
}

template <int kM, Out kOut>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const __grid_constant__ GemvArgs a) {
  __shared__ float partial[kWarps][kRows * kM];
  const int32_t t = static_cast<int32_t>(threadIdx.x);
  const uint4* w_row[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) w_row[r] = a.w + block_feature<kRows, kOut>(a.n, r) * a.ldw8;
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
  gemv_finish<kRows, kThreads, kM, kOut, false>(a, acc, partial);
}

// FP8 weights: a block of kThr threads takes kR output features; thread t the 16-byte columns
// (16 codes) t, t + kThr, ... of its kR weight rows (kR x kPer loads in flight) and the matching
// two 16-byte vectors of each activation row. The codes become fp16 pairs exactly
// (cvt.rn.f16x2.e4m3x2), then fp32; the row's scale multiplies the finished sum.
template <int kR, int kThr, int kM, Out kOut>
__global__ void __launch_bounds__(kThr) gemv_fp8_kernel(const __grid_constant__ GemvArgs a) {
  __shared__ float partial[kThr / 32][kR * kM];
  const int32_t t = static_cast<int32_t>(threadIdx.x);
  const int32_t k16 = a.k8 / 2;
  const uint4* w_row[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) w_row[r] = a.w + block_feature<kR, kOut>(a.n, r) * a.ldw8;
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
  gemv_finish<kR, kThr, kM, kOut, true>(a, acc, partial);
}

// One block per kR features (plain), or per kR / 2 gate | up pairs (SiLU-and-mul).
template <int kR>
dim3 grid_for(const GemvArgs& args, Out out) {
  return dim3(static_cast<unsigned>(out == Out::kSiluMul ? ceil_div(args.n / 2, kR / 2)
                                                         : ceil_div(args.n, kR)));
}

template <int kM>
cudaError_t launch_bf16(const GemvArgs& args, Out out, cudaStream_t stream) {
  const dim3 grid = grid_for<kRows>(args, out);
  const dim3 block(kThreads);
  switch (out) {
    case Out::kBF16: return launch_pdl(gemv_kernel<kM, Out::kBF16>, grid, block, 0, stream, args);
    case Out::kF32: return launch_pdl(gemv_kernel<kM, Out::kF32>, grid, block, 0, stream, args);
    case Out::kSiluMul:
      return launch_pdl(gemv_kernel<kM, Out::kSiluMul>, grid, block, 0, stream, args);
  }
  return cudaErrorInvalidValue;
}

template <int kR, int kThr, int kM>
cudaError_t launch_fp8(const GemvArgs& args, Out out, cudaStream_t stream) {
  const dim3 grid = grid_for<kR>(args, out);
  const dim3 block(kThr);
  switch (out) {
    case Out::kBF16:
      return launch_pdl(gemv_fp8_kernel<kR, kThr, kM, Out::kBF16>, grid, block, 0, stream, args);
    case Out::kF32:
      return launch_pdl(gemv_fp8_kernel<kR, kThr, kM, Out::kF32>, grid, block, 0, stream, args);
    case Out::kSiluMul:
      return launch_pdl(gemv_fp8_kernel<kR, kThr, kM, Out::kSiluMul>, grid, block, 0, stream,
                        args);
  }
  return cudaErrorInvalidValue;
}

constexpr GemvFp8Shape kFp8Shape = kGemvFp8Shapes[0];

constexpr bool same_shape(GemvFp8Shape a, GemvFp8Shape b) {
  return a.rows == b.rows && a.threads == b.threads;
}

// Another shape of kGemvFp8Shapes (m <= 2; gemv() checked the shape).
template <int kM>
cudaError_t launch_fp8_shape(const GemvArgs& args, Out out, GemvFp8Shape s, cudaStream_t stream) {
  static_assert(kM <= 2);
  static_assert(same_shape(kGemvFp8Shapes[1], {8, 256}) && same_shape(kGemvFp8Shapes[2], {8, 128}) &&
                same_shape(kGemvFp8Shapes[3], {16, 128}) && same_shape(kGemvFp8Shapes[4], {2, 256}));
  if (same_shape(s, kGemvFp8Shapes[1])) return launch_fp8<8, 256, kM>(args, out, stream);
  if (same_shape(s, kGemvFp8Shapes[2])) return launch_fp8<8, 128, kM>(args, out, stream);
  if (same_shape(s, kGemvFp8Shapes[3])) return launch_fp8<16, 128, kM>(args, out, stream);
  if (same_shape(s, kGemvFp8Shapes[4])) return launch_fp8<2, 256, kM>(args, out, stream);
  return launch_fp8<kFp8Shape.rows, kFp8Shape.threads, kM>(args, out, stream);
}

template <int kM>
Status launch_rows(const GemvArgs& args, Out out, bool w_fp8, GemvFp8Shape fp8_shape,
                   cudaStream_t stream) {
  cudaError_t e;
  if (w_fp8) {
    if constexpr (kM <= 2) {
      e = launch_fp8_shape<kM>(args, out, fp8_shape, stream);
    } else {
      e = launch_fp8<kFp8Shape.rows, kFp8Shape.threads, kM>(args, out, stream);
    }
  } else {
    e = launch_bf16<kM>(args, out, stream);
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
  if (p.silu_and_mul && (p.n % 2 != 0 || p.d_dtype != DType::kBF16 || p.accumulate)) {
    return Status::InvalidArgument(
        "gemv: the SiLU-and-mul epilogue needs an even n (gate | up), a BF16 d and no accumulate");
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
  const Out out = p.silu_and_mul              ? Out::kSiluMul
                  : p.d_dtype == DType::kF32 ? Out::kF32
                                             : Out::kBF16;
  switch (p.m) {
    case 1: return launch_rows<1>(args, out, p.w_fp8, p.fp8_shape, stream);
    case 2: return launch_rows<2>(args, out, p.w_fp8, p.fp8_shape, stream);
    case 3: return launch_rows<3>(args, out, p.w_fp8, p.fp8_shape, stream);
    case 4: return launch_rows<4>(args, out, p.w_fp8, p.fp8_shape, stream);
    case 5: return launch_rows<5>(args, out, p.w_fp8, p.fp8_shape, stream);
    case 6: return launch_rows<6>(args, out, p.w_fp8, p.fp8_shape, stream);
    case 7: return launch_rows<7>(args, out, p.w_fp8, p.fp8_shape, stream);
    default: return launch_rows<8>(args, out, p.w_fp8, p.fp8_shape, stream);
  }
}

}  // namespace strata::cuda::detail

// strata_tensor_core_bench: what the tensor cores of this GPU give each instruction path, measured
// before an attention kernel is designed around one (docs/kernels.md, "FP8 prefill on the FP8
// tensor cores").
//
//   1. mma.sync (the warp-level instructions every Strata kernel uses today): fp16 m16n8k16
//      against e4m3 m16n8k32. On Hopper the latter is compiled into conversions plus fp16
//      products (F2FP.F16.E4M3.UNPACK_B and HMMA.16816 in its SASS), so FP8 gains nothing
//      there; this measures it.
//   2. wgmma (sm_90a, one warpgroup of 4 warps, B from shared memory): bf16 m64n64k16 against
//      e4m3 m64n64k32, A from registers, both at the same instruction pattern.
//   3. The layout an FP8 attention kernel needs: D = A B^T with A (64 x 128 e4m3 codes) in
//      registers and B (64 x 128) in shared memory as 8 x 16-byte core matrices without swizzle,
//      K-major, checked element by element against the host's product of the decoded values.
//      Both readings of the descriptor's two byte offsets are tried and reported.
//
// Rates are TFLOP/s over a run of back-to-back instructions between two events (median of 5),
// every SM busy; the table prints each FP8 rate as a ratio to its 16-bit counterpart.
//
//   strata_tensor_core_bench [--json]

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace {

using namespace strata::cuda::detail;
using strata::cuda::bench::die_if;

// Median milliseconds of 5 event-timed launches (after one untimed) on the default stream.
template <typename Kernel>
double median_ms(Kernel launch) {
  launch();
  return strata::cuda::bench::median_ms_per_call(nullptr, 5, 1, [&](int) { launch(); });
}

constexpr int kIters = 4096;  // instruction groups per warp in the rate kernels

// ---- mma.sync ----------------------------------------------------------------------------

// 8 independent accumulator chains per warp, kIters rounds; the sum is stored so that nothing is
// dead code.
template <bool kFp8>
__global__ void mma_sync_rate(float* out) {
  float d[8][4] = {};
  const uint32_t a_base = threadIdx.x * 0x01010101u & 0x3c3c3c3cu;  // small finite codes / values
  for (int i = 0; i < kIters; ++i) {
    // Operands that differ per round and per chain: with shared or loop-invariant ones the
    // compiler computes the e4m3 path's (emulated) products once and adds them (seen in SASS).
    const uint32_t a_round = a_base ^ (static_cast<uint32_t>(i) & 0x03030303u);
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const uint32_t a0 = a_round ^ (static_cast<uint32_t>(c) * 0x01000100u);
      const uint32_t b0 = a0 ^ 0x04040404u;
      if constexpr (kFp8) {
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
            : "r"(a0), "r"(a0), "r"(a0), "r"(a0), "r"(b0), "r"(b0));
      } else {
        const uint32_t a[4] = {a0, a0, a0, a0};
        mma_16816<strata::DType::kF16>(d[c], a, b0, b0);
      }
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < 8; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// ---- wgmma (kernels/cuda/wgmma.cuh) --------------------------------------------------------

template <bool kFp8>
__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                         bool accumulate) {
  if constexpr (kFp8) {
    wgmma_m64n64k32_e4m3(d, a, b, accumulate);
  } else {
    wgmma_m64n64k16_bf16(d, a, b, accumulate);
  }
}

// One warpgroup per block: kIters groups of 8 k-steps (one commit and wait each) into one
// accumulator, B from a 16 KiB tile (each k-step reads 64 rows x 32 bytes of it).
template <bool kFp8>
__global__ void __launch_bounds__(128) wgmma_rate(float* out) {
  __shared__ __align__(128) uint8_t b_tile[16384];
  for (int i = threadIdx.x; i < 16384 / 4; i += 128) {
    reinterpret_cast<uint32_t*>(b_tile)[i] = (i * 0x01010101u) & 0x3c3c3c3cu;
  }
  fence_proxy_async();
  __syncthreads();
  const uint32_t a0 = threadIdx.x * 0x01010101u & 0x3c3c3c3cu;
  const uint32_t a[4] = {a0, a0 ^ 1u, a0 ^ 2u, a0 ^ 3u};
  float d[8][4] = {};
  for (int i = 0; i < kIters; ++i) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      // k-step s: 32 bytes of K (two core-matrix columns) of all 64 rows.
      wgmma_rs<kFp8>(d, a, wgmma_desc(b_tile + s * 2048, 1024, 128), true);
    }
    wgmma_commit();
    wgmma_wait_all();
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

// D = A B^T for A, B 64 x 128 e4m3 codes (row-major in global memory), B staged into shared
// memory as core matrices: byte (n, k) at (k / 16) * k_stride + (n / 8) * n_stride + (n % 8) * 16
// + k % 16. The descriptor gets (lbo, sbo); d is 64 x 64 fp32, row-major.
__global__ void __launch_bounds__(128)
    wgmma_layout(const uint8_t* a, const uint8_t* b, float* d, uint32_t k_stride,
                 uint32_t n_stride, uint32_t lbo, uint32_t sbo) {
  // Twice the tile: with the offsets swapped, the descriptor reaches up to 13.6 KB in.
  __shared__ __align__(128) uint8_t b_tile[2 * 64 * 128];
  for (int i = threadIdx.x; i < 64 * 128 / 16; i += 128) {
    const int n = i / 8;  // 8 chunks of 16 bytes per row
    const int kc = i % 8;
    *reinterpret_cast<uint4*>(b_tile + kc * k_stride + (n / 8) * n_stride + (n % 8) * 16) =
        reinterpret_cast<const uint4*>(b)[i];
  }
  fence_proxy_async();
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;
  const int t = lane & 3;
  float acc[8][4] = {};
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) {  // k-steps of 32
    const uint8_t* row_a = a + (16 * warp + g) * 128 + 32 * s;
    const uint8_t* row_b = row_a + 8 * 128;
    const uint32_t af[4] = {*reinterpret_cast<const uint32_t*>(row_a + 4 * t),
                            *reinterpret_cast<const uint32_t*>(row_b + 4 * t),
                            *reinterpret_cast<const uint32_t*>(row_a + 16 + 4 * t),
                            *reinterpret_cast<const uint32_t*>(row_b + 16 + 4 * t)};
    wgmma_m64n64k32_e4m3(acc, af, wgmma_desc(b_tile + 2 * s * k_stride, lbo, sbo), s > 0);
  }
  wgmma_commit();
  wgmma_wait_all();
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int row = 16 * warp + g;
    const int col = 8 * j + 2 * t;
    d[row * 64 + col] = acc[j][0];
    d[row * 64 + col + 1] = acc[j][1];
    d[(row + 8) * 64 + col] = acc[j][2];
    d[(row + 8) * 64 + col + 1] = acc[j][3];
  }
}

// Max |gpu - host| over the 64 x 64 product with the given staging and descriptor offsets.
double layout_error(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                    const std::vector<double>& ref, uint32_t k_stride, uint32_t n_stride,
                    uint32_t lbo, uint32_t sbo) {
  uint8_t *da, *db;
  float* dd;
  die_if(cudaMalloc(&da, a.size()), "malloc");
  die_if(cudaMalloc(&db, b.size()), "malloc");
  die_if(cudaMalloc(&dd, 64 * 64 * 4), "malloc");
  die_if(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice), "copy");
  die_if(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice), "copy");
  wgmma_layout<<<1, 128>>>(da, db, dd, k_stride, n_stride, lbo, sbo);
  die_if(cudaGetLastError(), "wgmma_layout launch");
  std::vector<float> d(64 * 64);
  die_if(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost), "copy back");
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  double err = 0;
  for (size_t i = 0; i < d.size(); ++i) err = std::max(err, std::fabs(d[i] - ref[i]));
  return err;
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::fprintf(stderr, "strata_tensor_core_bench: no CUDA device\n");
    return 1;
  }
  const int sms = prop.multiProcessorCount;
  float* out;
  die_if(cudaMalloc(&out, int64_t{sms} * 8 * 256 * 4), "malloc");

  // TFLOP/s of `kernel` on 2 blocks per SM of `threads`, each block doing `block_flops`.
  const int blocks = 2 * sms;
  auto tflops = [&](void (*kernel)(float*), int threads, double block_flops) {
    const double ms = median_ms([&] { kernel<<<blocks, threads>>>(out); });
    return blocks * block_flops / (ms * 1e-3) / 1e12;
  };
  // mma.sync: 8 warps per block, 8 chains of kIters products of 2 * 16 * 8 * k flops per warp.
  auto mma_tflops = [&](bool fp8) {
    return tflops(fp8 ? mma_sync_rate<true> : mma_sync_rate<false>, 256,
                  8.0 * 8 * kIters * 2 * 16 * 8 * (fp8 ? 32 : 16));
  };
  // wgmma: one warpgroup per block, kIters groups of 8 products of 2 * 64 * 64 * k flops.
  auto wgmma_tflops = [&](bool fp8) {
    return tflops(fp8 ? wgmma_rate<true> : wgmma_rate<false>, 128,
                  double(kIters) * 8 * 2 * 64 * 64 * (fp8 ? 32 : 16));
  };
  const double mma_f16 = mma_tflops(false), mma_e4m3 = mma_tflops(true);
  const double wg_bf16 = wgmma_tflops(false), wg_e4m3 = wgmma_tflops(true);

  // The layout check: random codes with exponent fields 4..9 (2^-3 <= |value| < 8; no NaN).
  std::mt19937 rng(7);
  std::vector<uint8_t> a(64 * 128), b(64 * 128);
  for (auto* m : {&a, &b}) {
    for (auto& c : *m) {
      do {
        c = static_cast<uint8_t>(rng());
      } while (((c >> 3) & 15) < 4 || ((c >> 3) & 15) > 9);  // 2^-3 <= |value| < 8
    }
  }
  std::vector<double> ref(64 * 64);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 64; ++n) {
      double s = 0;
      for (int k = 0; k < 128; ++k) {
        s += double(strata::fp8_e4m3_to_f32(a[m * 128 + k])) *
             strata::fp8_e4m3_to_f32(b[n * 128 + k]);
      }
      ref[m * 64 + n] = s;
    }
  }
  // Staging: k-chunks 1024 bytes apart, 8-row groups 128 apart. Reading 1: LBO = the k-chunk
  // stride, SBO = the row-group stride; reading 2: swapped.
  const double err_kn = layout_error(a, b, ref, 1024, 128, 1024, 128);
  const double err_nk = layout_error(a, b, ref, 1024, 128, 128, 1024);
  // A wrong layout pairs the wrong codes: errors of the order of the sums (~100). The right one
  // leaves only the accumulator's rounding (reported: how many bits the FP8 path keeps).
  const bool ok = std::min(err_kn, err_nk) <= 1.0;

  if (json) {
    std::printf(
        "{\"device\": \"%s\", \"mma_sync_f16_tflops\": %.1f, \"mma_sync_e4m3_tflops\": %.1f, "
        "\"wgmma_bf16_tflops\": %.1f, \"wgmma_e4m3_tflops\": %.1f, "
        "\"layout_error_lbo_k\": %.3g, \"layout_error_lbo_n\": %.3g, \"layout_ok\": %s}\n",
        prop.name, mma_f16, mma_e4m3, wg_bf16, wg_e4m3, err_kn, err_nk, ok ? "true" : "false");
  } else {
    std::printf("%s, %d SMs\n", prop.name, sms);
    std::printf("| path | 16-bit TFLOP/s | e4m3 TFLOP/s | e4m3 / 16-bit |\n|---|---|---|---|\n");
    std::printf("| mma.sync (m16n8k16 f16 / m16n8k32 e4m3) | %.1f | %.1f | %.2f |\n", mma_f16,
                mma_e4m3, mma_e4m3 / mma_f16);
    std::printf("| wgmma RS (m64n64k16 bf16 / m64n64k32 e4m3) | %.1f | %.1f | %.2f |\n", wg_bf16,
                wg_e4m3, wg_e4m3 / wg_bf16);
    std::printf("wgmma e4m3 layout, no swizzle, K-major B: max error %.3g with LBO = k-chunk "
                "stride, %.3g with LBO = row-group stride: %s\n",
                err_kn, err_nk, ok ? "ok" : "MISMATCH");
  }
  cudaFree(out);
  return ok ? 0 : 2;
}

// strata_cpu_floor: the CPU's two ceilings, measured on this machine at a chosen thread count, for
// every CPU benchmark to be read against in the same run (METHOD.md: measure the floor, do not
// quote a datasheet).
//
//   read bandwidth  a 1 GiB buffer (far beyond the caches; in 2 MiB pages, as the engine's
//                   weights) summed once per pass with 8-lane vector adds, split by rows over
//                   --threads threads that start together; GB/s of bytes read, the best of the
//                   passes.
//   FP32 peak       independent fused multiply-adds on registers only, with the instruction the
//                   linear kernel's widest path uses (vfmadd231ps on zmm registers where the CPU
//                   has AVX-512, else AVX2+FMA, else SSE2 mul+add): the most flop/s any fp32
//                   GEMM can reach here.
//
// Each measurement runs one slice per thread on dedicated threads released together, not through
// the engine's ThreadPool: the pool lets the caller run a late worker's chunk itself, which on a
// busy machine would measure one thread and call it two. Both ceilings are the BEST of repeated
// measurements, not the median: on a shared machine another process can only lower a pass (a
// descheduled thread stalls the slowest slice), and a ceiling lowered by load would flatter every
// ratio read against it. The peak repeats short runs (~0.2 ms, shorter than a time slice) for the
// same reason.
//   BF16 peak       the same with AVX512_BF16 dot products (vdpbf16ps: 32 multiply-adds per
//                   instruction), printed only where the CPU has them.
//
// Usage: strata_cpu_floor [--threads N] [--passes P] [--json]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <atomic>
#include <thread>

#include "core/huge_page_buffer.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool has(const char* feature) {
#if defined(__x86_64__)
  // __builtin_cpu_supports needs a literal; the few features used here are spelled out.
  const std::string f = feature;
  if (f == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
#endif
  (void)feature;
  return false;
}

// Runs fn(t) for t in [0, parts) on `parts` threads (the caller is the last) released together;
// returns the seconds from the release to the last one finishing.
template <typename Fn>
double on_threads(int parts, const Fn& fn) {
  std::atomic<int> arrived{0};
  std::atomic<bool> go{false};
  const auto body = [&](int t) {
    arrived.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    fn(t);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t + 1 < parts; ++t) threads.emplace_back(body, t);
  while (arrived.load() < parts - 1) std::this_thread::yield();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  body(parts - 1);
  for (auto& th : threads) th.join();
  return seconds_since(t0);
}

// ---- read bandwidth -------------------------------------------------------------------------

float sum_portable(const float* p, size_t n) {
  using F32x8 = float __attribute__((vector_size(32)));
  F32x8 a = {}, b = {};
  for (size_t i = 0; i + 16 <= n; i += 16) {
    F32x8 x, y;
    std::memcpy(&x, p + i, sizeof(x));
    std::memcpy(&y, p + i + 8, sizeof(y));
    a += x;
    b += y;
  }
  a += b;
  float s = 0;
  for (int l = 0; l < 8; ++l) s += a[l];
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float l : lanes) s += l;
  return s;
}
#endif

double read_bandwidth_gbs(int parts, int passes) {
  const size_t n = size_t{256} << 20;  // 1 GiB of floats
  // In 2 MiB pages, as the engine holds its weights (HugePageBuffer): on 4 KiB pages the pass also
  // pays a TLB miss every 4 KiB, and a decode step read faster than this "ceiling".
  HugePageBuffer buffer(n * sizeof(float), "the read-bandwidth buffer");
  auto* data = reinterpret_cast<float*>(buffer.data());
  // Written by the same split as the reads, so pages are local to the threads that read them.
  const size_t per = n / static_cast<size_t>(parts);
  on_threads(parts, [&](int t) {
    for (size_t i = per * static_cast<size_t>(t); i < per * static_cast<size_t>(t + 1); ++i) {
      data[i] = static_cast<float>(i & 1023) * 1e-3f;
    }
  });
  std::vector<float> sink(static_cast<size_t>(parts));
  const bool avx2 = has("avx2");
  std::vector<double> gbs;
  for (int p = 0; p < passes + 1; ++p) {
    const double s = on_threads(parts, [&](int t) {
      const float* lo = data + per * static_cast<size_t>(t);
#if defined(__x86_64__)
      sink[static_cast<size_t>(t)] = avx2 ? sum_avx2(lo, per) : sum_portable(lo, per);
#else
      sink[static_cast<size_t>(t)] = sum_portable(lo, per);
#endif
    });
    if (p > 0) gbs.push_back(static_cast<double>(per * static_cast<size_t>(parts) * 4) / s / 1e9);
  }
  volatile float keep = sink[0];
  (void)keep;
  return *std::max_element(gbs.begin(), gbs.end());
}

// ---- compute peaks --------------------------------------------------------------------------

constexpr int64_t kIters = 20'000'000;

// Each returns flops done by one thread (12 independent accumulators hide the FMA latency).
double fma_portable(int64_t iters, float* sink) {
  using F32x4 = float __attribute__((vector_size(16)));
  F32x4 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = F32x4{} + 1.0f * static_cast<float>(j);
  const F32x4 a = F32x4{} + 0.999999f, b = F32x4{} + 1e-7f;
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& v : acc) v = v * a + b;
  }
  for (const auto& v : acc) *sink += v[0];
  return 12.0 * 4 * 2 * static_cast<double>(iters);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) double fma_avx2(int64_t iters, float* sink) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& v : acc) v = _mm256_fmadd_ps(v, a, b);
  }
  for (const auto& v : acc) *sink += _mm256_cvtss_f32(v);
  return 12.0 * 8 * 2 * static_cast<double>(iters);
}

__attribute__((target("avx512f"))) double fma_avx512(int64_t iters, float* sink) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& v : acc) v = _mm512_fmadd_ps(v, a, b);
  }
  for (const auto& v : acc) {
    float lanes[16];
    _mm512_storeu_ps(lanes, v);
    *sink += lanes[0];
  }
  return 12.0 * 16 * 2 * static_cast<double>(iters);
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16_avx512(int64_t iters, float* sink) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& v : acc) v = _mm512_dpbf16_ps(v, a, a);
  }
  for (const auto& v : acc) {
    float lanes[16];
    _mm512_storeu_ps(lanes, v);
    *sink += lanes[0];
  }
  return 12.0 * 32 * 2 * static_cast<double>(iters);
}
#endif

using PeakFn = double (*)(int64_t, float*);

// GFLOP/s of fn on every thread at once, the best of kPeakReps short runs.
double peak_gflops(int parts, PeakFn fn) {
  constexpr int kPeakReps = 100;
  std::vector<double> rates;
  for (int rep = 0; rep < kPeakReps; ++rep) {
    std::vector<float> sink(static_cast<size_t>(parts) * 16);
    std::vector<double> flops(static_cast<size_t>(parts));
    const double s = on_threads(parts, [&](int t) {
      flops[static_cast<size_t>(t)] = fn(kIters / 160, &sink[static_cast<size_t>(t) * 16]);
    });
    double total = 0;
    for (double f : flops) total += f;
    rates.push_back(total / s / 1e9);
  }
  return *std::max_element(rates.begin(), rates.end());
}

struct Floor {
  int threads = 0;
  double read_gbs = 0;
  double fp32_gflops = 0;
  const char* fp32_isa = "sse2";
  double bf16_gflops = 0;  // 0: no BF16 dot-product instructions
};

Floor measure(int threads, int passes) {
  Floor f;
  f.threads = std::max(1, threads);
  f.read_gbs = read_bandwidth_gbs(f.threads, passes);
  PeakFn fp32 = fma_portable;
#if defined(__x86_64__)
  if (has("avx512f")) {
    fp32 = fma_avx512;
    f.fp32_isa = "avx512f fma zmm";
  } else if (has("avx2")) {
    fp32 = fma_avx2;
    f.fp32_isa = "avx2+fma";
  }
  if (has("avx512bf16")) f.bf16_gflops = peak_gflops(f.threads, dpbf16_avx512);
#endif
  f.fp32_gflops = peak_gflops(f.threads, fp32);
  return f;
}

int run(int argc, char** argv) {
  int threads = 2, passes = 7;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--passes" && i + 1 < argc) {
      passes = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: strata_cpu_floor [--threads N] [--passes P] [--json]\n");
      return 2;
    }
  }
  const Floor f = measure(threads, passes);
  if (json) {
    std::printf(
        "{\"threads\": %d, \"read_gbs\": %.3f, \"fp32_gflops\": %.2f, \"fp32_isa\": \"%s\", "
        "\"bf16_gflops\": %.2f}\n",
        f.threads, f.read_gbs, f.fp32_gflops, f.fp32_isa, f.bf16_gflops);
    return 0;
  }
  std::printf("threads                 %d\n", f.threads);
  std::printf("read bandwidth          %.1f GB/s (1 GiB, best of %d passes)\n", f.read_gbs,
              passes);
  std::printf("FP32 peak (%s)   %.1f GFLOP/s\n", f.fp32_isa, f.fp32_gflops);
  if (f.bf16_gflops > 0) {
    std::printf("BF16 peak (vdpbf16ps)   %.1f GFLOP/s\n", f.bf16_gflops);
  } else {
    std::printf("BF16 peak               - (no AVX512_BF16)\n");
  }
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) { return strata::bench::run(argc, argv); }

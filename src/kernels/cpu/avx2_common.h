#pragma once
// What the AVX2 kernels (linear_fma_avx2.cc, attention_avx2.cc, elementwise_avx2.cc) share, as
// avx512_target.h is for AVX-512: <immintrin.h>; STRATA_FMA_AVX2, the per-function target of the
// kAvx2 path (AVX2 + FMA + F16C, what cpu_isa.cc checks before choosing it); reduce8,
// reduce_lanes (cpu_common.h) of eight 8-lane accumulators at once; and lanes_below, the mask of
// a last step's lanes. Only call them when cpu_supports(CpuIsa::kAvx2).

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define STRATA_FMA_AVX2 __attribute__((target("avx2,fma,f16c")))

#include <cstdint>

namespace strata::cpu::detail {

// Lanes [0, count) all ones, the rest zero (count in 0..8): the mask with which a last step's
// _mm256_maskload_ps reads nothing past the end of a row.
STRATA_FMA_AVX2 inline __m256i lanes_below(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// reduce_lanes (cpu_common.h) of 8 accumulators at once, then + bias: out[r * ldo + c] for
// acc[r * cols + c]. The same additions on the same pairs -- (l, l + 4), then (0 + 2, 1 + 3)
// of the sums, then those two -- done across registers instead of one output at a time, so the
// bits are reduce_lanes' (IEEE addition is commutative).
STRATA_FMA_AVX2 inline void reduce8(const __m256* acc, const float* bias, float* out, int64_t ldo,
                                    int cols) {
  // s[p] = [a(2p) lanes l + l+4 | a(2p + 1) lanes l + l+4], l < 4.
  __m256 s[4];
  for (int p = 0; p < 4; ++p) {
    const __m256 lo = _mm256_permute2f128_ps(acc[2 * p], acc[2 * p + 1], 0x20);
    const __m256 hi = _mm256_permute2f128_ps(acc[2 * p], acc[2 * p + 1], 0x31);
    s[p] = _mm256_add_ps(lo, hi);
  }
  // t[q] per 128-bit half: [x0 + x2, x1 + x3, y0 + y2, y1 + y3] for x = s[2q], y = s[2q + 1].
  __m256 t[2];
  for (int q = 0; q < 2; ++q) {
    const __m256 even = _mm256_shuffle_ps(s[2 * q], s[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 odd = _mm256_shuffle_ps(s[2 * q], s[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2));
    t[q] = _mm256_add_ps(even, odd);
  }
  // Lanes: a0, a2, a4, a6 | a1, a3, a5, a7 (a = r * cols + c).
  alignas(32) float sums[8];
  _mm256_store_ps(sums, _mm256_hadd_ps(t[0], t[1]));
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // accumulator of each lane
  for (int lane = 0; lane < 8; ++lane) {
    const int a = kOrder[lane];
    const int r = a / cols, c = a % cols;
    out[r * ldo + c] = bias != nullptr ? sums[lane] + bias[c] : sums[lane];
  }
}

}  // namespace strata::cpu::detail
#endif

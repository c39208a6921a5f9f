#pragma once
// What the AVX-512 matrix kernels (linear_avx512.cc, gemm_bf16_avx512.cc) end and stream with:
// the fixed-tree lane reduction every tile's outputs take, the tile store, and the range of next
// weight lines a tile prefetches. Include after avx512_target.h; x86-64 only. The BF16 kernel's
// functions (a wider target) inline these.

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/avx512_target.h"

#if defined(__x86_64__)
namespace strata::cpu::detail {

// The lane sums of four accumulators: element j of the result is a_j's 16 lanes added in one
// fixed tree -- (l, l + 8), then (l, l + 4), then (l, l + 2), then (l, l + 1). Every step is a
// lane-wise add or a data move, so element j depends on a_j alone: an output reduced next to
// three others or next to zeros (a narrow tile) gets the same bits.
STRATA_AVX512 inline __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 t01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 t23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
  // 128-bit quarter j now holds a_j's lanes (l + l+8) and (l+4 + l+12) in two halves of t.
  const __m512 s =
      _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_f32x4(t01, t23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 s2 = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s3 = _mm512_add_ps(s2, _mm512_permute_ps(s2, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i first_of_each_quarter =
      _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(first_of_each_quarter, s3));
}

// out[r][c] = the lane sum of acc[r][c] (+ bias[c]): the one reduction every tile ends with.
template <int R, int C>
STRATA_AVX512 inline void store_tile(const __m512 (&acc)[R][C], const float* bias, float* out,
                                     int64_t ldo) {
  const __m512 zero = _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    for (int c0 = 0; c0 < C; c0 += 4) {
      __m128 s = reduce4(acc[r][c0], c0 + 1 < C ? acc[r][c0 + 1] : zero,
                         c0 + 2 < C ? acc[r][c0 + 2] : zero, c0 + 3 < C ? acc[r][c0 + 3] : zero);
      const auto cols = static_cast<__mmask8>((1u << std::min(4, C - c0)) - 1u);
      if (bias != nullptr) s = _mm_add_ps(s, _mm_maskz_loadu_ps(cols, bias + c0));
      _mm_mask_storeu_ps(out + r * ldo + c0, cols, s);
    }
  }
}

// How far ahead of a single row of x (a decode step's gemv, both kernels) the weight stream is
// prefetched: each weight row is read start to end, one sequential run per thread.
inline constexpr int64_t kGemvPrefetchBytes = 8192;

// The weight lines a tile prefetches while it computes, issued at an even rate over its k steps
// (a burst fills the miss buffers and stalls the loads the FMAs wait for). The lines belong to
// the next group of kCols weight rows and are counted in the order its tiles will read them:
// line j is row j % kCols, bytes 64 * (j / kCols) on, so the start of every row arrives first.
// Prefetches never fault, so the group may lie past the end of the weights.
struct PrefetchRange {
  const char* group = nullptr;  // the next group's first row
  int64_t first = 0;            // this tile's first line
  int64_t lines = 0;            // 0: prefetch nothing
  int64_t row_bytes = 0;        // bytes between the group's rows
};

}  // namespace strata::cpu::detail
#endif

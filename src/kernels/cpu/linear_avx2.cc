#include "kernels/cpu/linear_avx2.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/reduce_avx2.h"

namespace strata::cpu::detail {

#if defined(__x86_64__) || defined(__i386__)
namespace {

// Per-function target: the rest of the library stays baseline x86-64. No "fma" here on purpose:
// the kernel must multiply and add separately, exactly like the portable path.
#define STRATA_AVX2 __attribute__((target("avx2")))

// An R x C block of outputs, one 8-lane accumulator each (see linear_avx2.h for the order).
// `ahead` is where the next tile's weight rows start: each k step prefetches the share of them that
// it reads of its own rows, so a 1 x 4 decode tile keeps a tile's worth of DRAM reads in flight
// (prefetches never fault, so ahead may point past the weights).
// Rows of w are ldw apart.
template <int R, int C>
STRATA_AVX2 void dot_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k,
                          float* out, int64_t ldo) {
  const char* ahead = reinterpret_cast<const char*>(w + C * ldw);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    _mm_prefetch(ahead + i * C * static_cast<int64_t>(sizeof(float)), _MM_HINT_T0);
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + i);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_loadu_ps(w + c * ldw + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(xv[r], wv));
    }
  }
  const int64_t tail = k - i;
  if constexpr (R * C == 8) {
    if (tail == 0) return reduce8(&acc[0][0], nullptr, out, ldo, C);
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float lanes[kLanes];
      _mm256_storeu_ps(lanes, acc[r][c]);
      for (int64_t l = 0; l < tail; ++l) lanes[l] += x[r * ldx + i + l] * w[c * ldw + i + l];
      out[r * ldo + c] = reduce_lanes(lanes);
    }
  }
}

// 4 x 2 tiles (8 accumulators: enough independent adds, each x and w load used twice or four
// times); leftover rows of x take 1 x 4 and 1 x 1 tiles, which a decode row (m = 1) uses alone.
STRATA_AVX2 void matmul_tiles(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                              int64_t n, int64_t k, float* out, int64_t ldo) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    int64_t c = 0;
    for (; c + 2 <= n; c += 2) {
      dot_tile<4, 2>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
    for (; c < n; ++c) {
      dot_tile<4, 1>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
  }
  for (; r < m; ++r) {
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
      dot_tile<1, 4>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
    for (; c < n; ++c) {
      dot_tile<1, 1>(x + r * ldx, ldx, w + c * ldw, ldw, k, out + r * ldo + c, ldo);
    }
  }
}

}  // namespace

void matmul_nt_f32_avx2(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                        int64_t n, int64_t k, float* out, int64_t ldo) {
  matmul_tiles(x, ldx, m, w, ldw, n, k, out, ldo);
}

#else  // not x86: the dispatcher never selects this path

void matmul_nt_f32_avx2(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                        float*, int64_t) {
  STRATA_CHECK(false, "matmul_nt_f32_avx2: not an x86 build");
}

#endif

}  // namespace strata::cpu::detail

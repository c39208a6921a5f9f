#include "kernels/cpu/linear_avx2.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "kernels/cpu/cpu_common.h"

namespace strata::cpu::detail {

#if defined(__x86_64__) || defined(__i386__)
namespace {

// Per-function target: the rest of the library stays baseline x86-64. No "fma" here on purpose:
// the kernel must multiply and add separately, exactly like the portable path.
#define STRATA_AVX2 __attribute__((target("avx2,f16c")))

// How one weight dtype is read: 8 elements widened to fp32 in a register, or one as a scalar.
struct F32Weights {
  using T = float;
  STRATA_AVX2 static __m256 load8(const T* p) { return _mm256_loadu_ps(p); }
  static float at(const T* p) { return *p; }
};

struct Bf16Weights {
  using T = uint16_t;
  STRATA_AVX2 static __m256 load8(const T* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float at(const T* p) { return bf16_to_f32(*p); }
};

struct F16Weights {
  using T = uint16_t;
  STRATA_AVX2 static __m256 load8(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float at(const T* p) { return f16_to_f32(*p); }
};

// reduce_lanes (cpu_common.h) of 8 accumulators at once, then + bias: out[r * ldo + c] for
// acc[r * cols + c]. The same additions on the same pairs -- (l, l + 4), then (0 + 2, 1 + 3)
// of the sums, then those two -- done across registers instead of one output at a time, so the
// bits are reduce_lanes' (IEEE addition is commutative).
STRATA_AVX2 void reduce8(const __m256* acc, const float* bias, float* out, int64_t ldo, int cols) {
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

// An R x C block of outputs, one 8-lane accumulator each (see linear_avx2.h for the order).
// `ahead` is where the next tile's weight rows start: each k step prefetches the share of them that
// it reads of its own rows, so a 1 x 4 decode tile keeps a tile's worth of DRAM reads in flight
// (prefetches never fault, so ahead may point past the weights).
// Rows of w are ldw apart (k for a weight matrix).
template <class W, int R, int C>
STRATA_AVX2 void dot_tile(const float* x, int64_t ldx, const typename W::T* w, int64_t ldw,
                          int64_t k, const float* bias, float* out, int64_t ldo) {
  const char* ahead = reinterpret_cast<const char*>(w + C * ldw);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    _mm_prefetch(ahead + i * C * static_cast<int64_t>(sizeof(typename W::T)), _MM_HINT_T0);
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + i);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = W::load8(w + c * ldw + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(xv[r], wv));
    }
  }
  const int64_t tail = k - i;
  if constexpr (R * C == 8) {
    if (tail == 0) return reduce8(&acc[0][0], bias, out, ldo, C);
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float lanes[kLanes];
      _mm256_storeu_ps(lanes, acc[r][c]);
      for (int64_t l = 0; l < tail; ++l)
        lanes[l] += x[r * ldx + i + l] * W::at(w + c * ldw + i + l);
      float s = reduce_lanes(lanes);
      if (bias != nullptr) s += bias[c];
      out[r * ldo + c] = s;
    }
  }
}

// 4 x 2 tiles (8 accumulators: enough independent adds, each x and w load used twice or four
// times); leftover rows of x take 1 x 4 and 1 x 1 tiles, which a decode step (m = 1) uses alone.
template <class W>
STRATA_AVX2 void matmul_nt(const float* x, int64_t ldx, int64_t m, const typename W::T* w,
                           int64_t ldw, int64_t n, int64_t k, const float* bias, float* out,
                           int64_t ldo) {
  auto b = [&](int64_t c) { return bias == nullptr ? nullptr : bias + c; };
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    int64_t c = 0;
    for (; c + 2 <= n; c += 2) {
      dot_tile<W, 4, 2>(x + r * ldx, ldx, w + c * ldw, ldw, k, b(c), out + r * ldo + c, ldo);
    }
    for (; c < n; ++c) {
      dot_tile<W, 4, 1>(x + r * ldx, ldx, w + c * ldw, ldw, k, b(c), out + r * ldo + c, ldo);
    }
  }
  for (; r < m; ++r) {
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
      dot_tile<W, 1, 4>(x + r * ldx, ldx, w + c * ldw, ldw, k, b(c), out + r * ldo + c, ldo);
    }
    for (; c < n; ++c) {
      dot_tile<W, 1, 1>(x + r * ldx, ldx, w + c * ldw, ldw, k, b(c), out + r * ldo + c, ldo);
    }
  }
}

}  // namespace

void matmul_nt_avx2(const float* x, int64_t ldx, int64_t m, const void* w, DType dtype, int64_t n,
                    int64_t k, const float* bias, float* out, int64_t ldo) {
  switch (dtype) {
    case DType::kF32:
      return matmul_nt<F32Weights>(x, ldx, m, static_cast<const float*>(w), k, n, k, bias, out,
                                   ldo);
    case DType::kBF16:
      return matmul_nt<Bf16Weights>(x, ldx, m, static_cast<const uint16_t*>(w), k, n, k, bias, out,
                                    ldo);
    case DType::kF16:
      return matmul_nt<F16Weights>(x, ldx, m, static_cast<const uint16_t*>(w), k, n, k, bias, out,
                                   ldo);
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kI4:
      break;
  }
  STRATA_CHECK(false, "matmul_nt_avx2: weight dtype is not F32, BF16 or F16");
}

void matmul_nt_f32_avx2(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                        int64_t n, int64_t k, float* out, int64_t ldo) {
  matmul_nt<F32Weights>(x, ldx, m, w, ldw, n, k, nullptr, out, ldo);
}

#else  // not x86: the dispatcher never selects this path

void matmul_nt_avx2(const float*, int64_t, int64_t, const void*, DType, int64_t, int64_t,
                    const float*, float*, int64_t) {
  STRATA_CHECK(false, "matmul_nt_avx2: not an x86 build");
}

void matmul_nt_f32_avx2(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                        float*, int64_t) {
  STRATA_CHECK(false, "matmul_nt_f32_avx2: not an x86 build");
}

#endif

}  // namespace strata::cpu::detail

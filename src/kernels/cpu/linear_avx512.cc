#include "kernels/cpu/linear_avx512.h"

#include "kernels/cpu/avx512_target.h"

#include <algorithm>

#include "core/check.h"

namespace strata::cpu::detail {

#if defined(__x86_64__)
namespace {

constexpr int kRows = 4;                    // rows of x per register tile
constexpr int kCols = kAvx512TileCols;      // rows of W per register tile (4 x 6 = 24 accumulators)
constexpr int kLanes16 = 16;

// How one weight dtype is read: 16 elements widened to fp32 in a register, or the first `mask`
// of them (the k % 16 tail; masked-off elements are not read, so nothing past a row is touched).
struct F32Weights {
  using T = float;
  STRATA_AVX512 static __m512 load16(const T* p) { return _mm512_loadu_ps(p); }
  STRATA_AVX512 static __m512 load_tail(const T* p, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
};

struct Bf16Weights {
  using T = uint16_t;
  STRATA_AVX512 static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  STRATA_AVX512 static __m512 load16(const T* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  STRATA_AVX512 static __m512 load_tail(const T* p, __mmask16 mask) {
    return widen(_mm256_maskz_loadu_epi16(mask, p));
  }
};

struct F16Weights {
  using T = uint16_t;
  STRATA_AVX512 static __m512 load16(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  STRATA_AVX512 static __m512 load_tail(const T* p, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
};

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

// An R x C block of outputs, one accumulator each (order: linear_avx512.h). With kPrefetch, each
// k step also prefetches the share it reads of its own rows from the next C weight rows (where
// the next tile starts), so a few-row tile keeps a tile's worth of DRAM reads in flight;
// prefetches never fault, so that may point past the weights.
template <class W, int R, int C, bool kPrefetch>
STRATA_AVX512 void dot_tile(const float* x, int64_t ldx, const typename W::T* w, int64_t ldw,
                            int64_t k, const float* bias, float* out, int64_t ldo) {
  using T = typename W::T;
  constexpr int64_t kStepBytes = int64_t{C} * kLanes16 * static_cast<int64_t>(sizeof(T));
  const char* ahead = reinterpret_cast<const char*>(w + C * ldw);
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kLanes16 <= k; i += kLanes16) {
    if constexpr (kPrefetch) {
      const char* p = ahead + i * C * static_cast<int64_t>(sizeof(T));
      for (int64_t o = 0; o < kStepBytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
    }
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * ldx + i);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = W::load16(w + c * ldw + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (i < k) {
    const auto mask = static_cast<__mmask16>((1u << (k - i)) - 1u);
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_ps(mask, x + r * ldx + i);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = W::load_tail(w + c * ldw + i, mask);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_mask3_fmadd_ps(xv[r], wv, acc[r][c], mask);
    }
  }
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

// One R-row block against `cols` (1..kCols) weight rows.
template <class W, int R, bool kPrefetch>
STRATA_AVX512 void row_block(int64_t cols, const float* x, int64_t ldx, const typename W::T* w,
                             int64_t ldw, int64_t k, const float* bias, float* out, int64_t ldo) {
  switch (cols) {
    case 6: return dot_tile<W, R, 6, kPrefetch>(x, ldx, w, ldw, k, bias, out, ldo);
    case 5: return dot_tile<W, R, 5, kPrefetch>(x, ldx, w, ldw, k, bias, out, ldo);
    case 4: return dot_tile<W, R, 4, kPrefetch>(x, ldx, w, ldw, k, bias, out, ldo);
    case 3: return dot_tile<W, R, 3, kPrefetch>(x, ldx, w, ldw, k, bias, out, ldo);
    case 2: return dot_tile<W, R, 2, kPrefetch>(x, ldx, w, ldw, k, bias, out, ldo);
    default: return dot_tile<W, R, 1, kPrefetch>(x, ldx, w, ldw, k, bias, out, ldo);
  }
}

// Columns outer, rows inner: a group of kCols weight rows stays in L1 while the rows of x (in L2
// for a 64-row task) stream past it. 4-row tiles do 24 FMAs per 10 loads (compute-bound); the
// m % 4 remainder rows (and a decode step's single row) take 1..3-row tiles.
template <class W>
STRATA_AVX512 void matmul_nt(const float* x, int64_t ldx, int64_t m, const typename W::T* w,
                             int64_t ldw, int64_t n, int64_t k, const float* bias, float* out,
                             int64_t ldo) {
  static_assert(kCols == 6, "row_block dispatches 1..6 columns");
  for (int64_t c = 0; c < n; c += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, n - c);
    const typename W::T* wc = w + c * ldw;
    const float* bc = bias == nullptr ? nullptr : bias + c;
    int64_t r = 0;
    // The first block of rows prefetches the next group of weight rows, which then arrives while
    // the other blocks compute (it matters when W streams from DRAM: decode, the LM head).
    if (r + kRows <= m) {
      row_block<W, kRows, true>(cols, x, ldx, wc, ldw, k, bc, out + c, ldo);
      r += kRows;
    }
    for (; r + kRows <= m; r += kRows) {
      row_block<W, kRows, false>(cols, x + r * ldx, ldx, wc, ldw, k, bc, out + r * ldo + c, ldo);
    }
    switch (m - r) {
      case 3:
        row_block<W, 3, true>(cols, x + r * ldx, ldx, wc, ldw, k, bc, out + r * ldo + c, ldo);
        break;
      case 2:
        row_block<W, 2, true>(cols, x + r * ldx, ldx, wc, ldw, k, bc, out + r * ldo + c, ldo);
        break;
      case 1:
        row_block<W, 1, true>(cols, x + r * ldx, ldx, wc, ldw, k, bc, out + r * ldo + c, ldo);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void matmul_nt_avx512(const float* x, int64_t ldx, int64_t m, const void* w, DType dtype,
                      int64_t n, int64_t k, const float* bias, float* out, int64_t ldo) {
  switch (dtype) {
    case DType::kF32:
      return matmul_nt<F32Weights>(x, ldx, m, static_cast<const float*>(w), k, n, k, bias, out,
                                   ldo);
    case DType::kBF16:
      return matmul_nt<Bf16Weights>(x, ldx, m, static_cast<const uint16_t*>(w), k, n, k, bias,
                                    out, ldo);
    case DType::kF16:
      return matmul_nt<F16Weights>(x, ldx, m, static_cast<const uint16_t*>(w), k, n, k, bias,
                                   out, ldo);
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      break;
  }
  STRATA_CHECK(false, "matmul_nt_avx512: weight dtype is not F32, BF16 or F16");
}

void matmul_nt_f32_avx512(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                          int64_t n, int64_t k, float* out, int64_t ldo) {
  matmul_nt<F32Weights>(x, ldx, m, w, ldw, n, k, nullptr, out, ldo);
}

#else  // not x86-64: the dispatcher never selects this path

void matmul_nt_avx512(const float*, int64_t, int64_t, const void*, DType, int64_t, int64_t,
                      const float*, float*, int64_t) {
  STRATA_CHECK(false, "matmul_nt_avx512: not an x86-64 build");
}

void matmul_nt_f32_avx512(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                          float*, int64_t) {
  STRATA_CHECK(false, "matmul_nt_f32_avx512: not an x86-64 build");
}

#endif

}  // namespace strata::cpu::detail

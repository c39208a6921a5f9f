#include "kernels/cpu/linear_avx512.h"

#include "kernels/cpu/avx512_target.h"
#include "kernels/cpu/avx512_tile.h"

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

// An R x C block of outputs, one accumulator each (order: linear_avx512.h), prefetching `pf`.
// pf by reference: by value the 32-byte struct travels through memory, and the caller's copy of
// it (one 256-bit load of four 64-bit stores just made) failed store-to-load forwarding.
template <class W, int R, int C>
STRATA_AVX512 void dot_tile(const float* x, int64_t ldx, const typename W::T* w, int64_t ldw,
                            int64_t k, const PrefetchRange& pf, const float* bias, float* out,
                            int64_t ldo) {
  const int64_t steps = k / kLanes16;
  int64_t pf_row = pf.first % kCols;
  const char* pf_line = pf.group + (pf.first / kCols) * 64 + pf_row * pf.row_bytes;
  int64_t pf_credit = 0;  // Bresenham: pf.lines prefetches spread over `steps` steps
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kLanes16 <= k; i += kLanes16) {
    for (pf_credit += pf.lines; pf_credit >= steps; pf_credit -= steps) {
      _mm_prefetch(pf_line, _MM_HINT_T0);
      if (++pf_row == kCols) {
        pf_row = 0;
        pf_line += 64 - (kCols - 1) * pf.row_bytes;
      } else {
        pf_line += pf.row_bytes;
      }
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
  store_tile<R, C>(acc, bias, out, ldo);
}

// A decode step's single row of x (m = 1) against `n` weight rows, rows ldw = k apart. Each weight
// row is read start to end before the next, so the weights stream as one sequential run with a
// software prefetch kGemvPrefetchBytes ahead of it, one line per line read (the 4 x 6 tile reads
// six rows side by side: six short streams 1.8 KB apart for k = 896, which the hardware
// prefetchers never lock on to). The rows' chains are independent, so out-of-order execution
// overlaps one row's multiply-adds with the next's loads. Every output is dot_tile's chain and
// store_tile's reduction (four outputs at a time), so its bits are the tiled kernel's.

template <class W>
STRATA_AVX512 __m512 gemv_row(const float* x, const typename W::T* w, int64_t k) {
  constexpr int64_t kLineElems = 64 / sizeof(typename W::T);
  // uintptr_t: the prefetched lines may lie past the weights (prefetches never fault).
  uintptr_t pf = reinterpret_cast<uintptr_t>(w) + kGemvPrefetchBytes;
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLineElems <= k; i += kLineElems, pf += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
    for (int64_t j = 0; j < kLineElems; j += kLanes16) {
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + j), W::load16(w + i + j), acc);
    }
  }
  for (; i + kLanes16 <= k; i += kLanes16) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), W::load16(w + i), acc);
  }
  if (i < k) {
    const auto mask = static_cast<__mmask16>((1u << (k - i)) - 1u);
    acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + i), W::load_tail(w + i, mask), acc,
                                mask);
  }
  return acc;
}

template <class W>
STRATA_AVX512 void gemv(const float* x, const typename W::T* w, int64_t n, int64_t k,
                        const float* bias, float* out) {
  __m512 acc[1][4];
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    for (int j = 0; j < 4; ++j) acc[0][j] = gemv_row<W>(x, w + (c + j) * k, k);
    store_tile<1, 4>(acc, bias == nullptr ? nullptr : bias + c, out + c, 0);
  }
  for (; c < n; ++c) {  // the n % 4 rest, one output per tile
    const float* b = bias == nullptr ? nullptr : bias + c;
    dot_tile<W, 1, 1>(x, 0, w + c * k, k, k, PrefetchRange{}, b, out + c, 0);
  }
}

// One R-row block against `cols` (1..kCols) weight rows.
template <class W, int R>
STRATA_AVX512 void row_block(int64_t cols, const float* x, int64_t ldx, const typename W::T* w,
                             int64_t ldw, int64_t k, const PrefetchRange& pf, const float* bias,
                             float* out, int64_t ldo) {
  switch (cols) {
    case 6: return dot_tile<W, R, 6>(x, ldx, w, ldw, k, pf, bias, out, ldo);
    case 5: return dot_tile<W, R, 5>(x, ldx, w, ldw, k, pf, bias, out, ldo);
    case 4: return dot_tile<W, R, 4>(x, ldx, w, ldw, k, pf, bias, out, ldo);
    case 3: return dot_tile<W, R, 3>(x, ldx, w, ldw, k, pf, bias, out, ldo);
    case 2: return dot_tile<W, R, 2>(x, ldx, w, ldw, k, pf, bias, out, ldo);
    default: return dot_tile<W, R, 1>(x, ldx, w, ldw, k, pf, bias, out, ldo);
  }
}

// Columns outer, rows inner: a group of kCols weight rows stays in L1 (or L2, for long k) while
// the rows of x (in L2 for a 64-row task) stream past it. 4-row tiles do 24 FMAs per 10 loads
// (compute-bound); the m % 4 remainder rows (and a decode step's single row) take 1..3-row tiles.
//
// While a group computes, its tiles prefetch the next group (every weight of a decode step
// streams from DRAM: the model is far larger than the caches), each row tile its own slice.
template <class W>
STRATA_AVX512 void matmul_nt(const float* x, int64_t ldx, int64_t m, const typename W::T* w,
                             int64_t ldw, int64_t n, int64_t k, const float* bias, float* out,
                             int64_t ldo) {
  using T = typename W::T;
  static_assert(kCols == 6, "row_block dispatches 1..6 columns");
  if (m == 1 && ldw == k) return gemv<W>(x, w, n, k, bias, out);
  const int64_t tiles = (m + kRows - 1) / kRows;
  const int64_t row_bytes = ldw * static_cast<int64_t>(sizeof(T));
  const int64_t group_lines = kCols * ((k * static_cast<int64_t>(sizeof(T)) + 63) / 64);
  const int64_t lines_per_tile = (group_lines + tiles - 1) / tiles;
  for (int64_t c = 0; c < n; c += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, n - c);
    const T* wc = w + c * ldw;
    const float* bc = bias == nullptr ? nullptr : bias + c;
    // uintptr_t: the next group's address only feeds prefetches and may lie past the weights.
    const auto* next_group = reinterpret_cast<const char*>(
        reinterpret_cast<uintptr_t>(wc) + static_cast<uintptr_t>(kCols * row_bytes));
    // Full row tiles in serpentine order (forward in even groups, backward in odd ones), so the
    // rows of x the previous group read last are still in L1 (x is 56 KB at m = 16, k = 896:
    // more than L1 next to the weights). The slices of the next group's prefetch go by order of
    // execution, so the first tile to run fetches the first slice.
    const int64_t full_tiles = m / kRows;
    const bool backward = (c / kCols) % 2 == 1;
    for (int64_t t = 0; t < full_tiles; ++t) {
      const int64_t r = (backward ? full_tiles - 1 - t : t) * kRows;
      const PrefetchRange pf{next_group, t * lines_per_tile, lines_per_tile, row_bytes};
      row_block<W, kRows>(cols, x + r * ldx, ldx, wc, ldw, k, pf, bc, out + r * ldo + c, ldo);
    }
    const int64_t r = full_tiles * kRows;
    const PrefetchRange rest_pf{next_group, full_tiles * lines_per_tile, lines_per_tile, row_bytes};
    switch (m - r) {
      case 3:
        row_block<W, 3>(cols, x + r * ldx, ldx, wc, ldw, k, rest_pf, bc, out + r * ldo + c, ldo);
        break;
      case 2:
        row_block<W, 2>(cols, x + r * ldx, ldx, wc, ldw, k, rest_pf, bc, out + r * ldo + c, ldo);
        break;
      case 1:
        row_block<W, 1>(cols, x + r * ldx, ldx, wc, ldw, k, rest_pf, bc, out + r * ldo + c, ldo);
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
    case DType::kI4:
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

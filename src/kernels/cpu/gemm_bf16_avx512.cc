#include "kernels/cpu/gemm_bf16_avx512.h"

#include "kernels/cpu/avx512_target.h"
#include "kernels/cpu/avx512_tile.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

#if defined(__x86_64__)
#define STRATA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c")))
#endif

namespace strata::cpu::detail {

#if defined(__x86_64__)
namespace {

constexpr int kRows = kBf16TileRows;  // rows of x per register tile
constexpr int kCols = kBf16TileCols;  // rows of W per register tile (4 x 6 = 24 accumulators)
constexpr int64_t kStep = 32;         // BF16 elements per vdpbf16ps

// Rows of x: one packed row tile (pack_rows_to_bf16), whose step s is the kRows x kStep elements
// at x + s * kRows * kStep; a tile of R < kRows rows reads its first R slots.
template <int R, int C>
STRATA_AVX512_BF16 void dot_tile(const uint16_t* x, const uint16_t* w, int64_t k,
                                 const PrefetchRange& pf, const float* bias, float* out,
                                 int64_t ldo) {
  const int64_t steps = std::max<int64_t>(1, k / kStep);
  int64_t pf_row = pf.first % kCols;
  const char* pf_line = pf.group + (pf.first / kCols) * 64 + pf_row * pf.row_bytes;
  int64_t pf_credit = 0;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kStep <= k; i += kStep) {
    for (pf_credit += pf.lines; pf_credit >= steps; pf_credit -= steps) {
      _mm_prefetch(pf_line, _MM_HINT_T0);
      if (++pf_row == kCols) {
        pf_row = 0;
        pf_line += 64 - (kCols - 1) * pf.row_bytes;
      } else {
        pf_line += pf.row_bytes;
      }
    }
    __m512bh xv[R];
    for (int r = 0; r < R; ++r) xv[r] = (__m512bh)_mm512_loadu_si512(x + i * kRows + r * kStep);
    for (int c = 0; c < C; ++c) {
      const auto wv = (__m512bh)_mm512_loadu_si512(w + c * k + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
  }
  if (i < k) {
    const auto mask = static_cast<__mmask32>((uint64_t{1} << (k - i)) - 1u);
    __m512bh xv[R];
    for (int r = 0; r < R; ++r) xv[r] = (__m512bh)_mm512_loadu_si512(x + i * kRows + r * kStep);
    for (int c = 0; c < C; ++c) {
      const auto wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + c * k + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
  }
  store_tile<R, C>(acc, bias, out, ldo);
}

// A decode step's single row of x (m = 1), as linear_avx512.cc's gemv: each weight row read start
// to end before the next, one sequential run with a software prefetch kGemvPrefetchBytes ahead;
// dot_tile's vdpbf16ps chain and store_tile's reduction per output, so the tiled kernel's bits.
STRATA_AVX512_BF16 __m512 gemv_row(const uint16_t* x, const uint16_t* w, int64_t k) {
  // uintptr_t: the prefetched lines may lie past the weights (prefetches never fault).
  uintptr_t pf = reinterpret_cast<uintptr_t>(w) + kGemvPrefetchBytes;
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kStep <= k; i += kStep, pf += 64) {  // one 64-byte line per step
    _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(x + i),
                           (__m512bh)_mm512_loadu_si512(w + i));
  }
  if (i < k) {
    const auto mask = static_cast<__mmask32>((uint64_t{1} << (k - i)) - 1u);
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(x + i),
                           (__m512bh)_mm512_maskz_loadu_epi16(mask, w + i));
  }
  return acc;
}

}  // namespace

STRATA_AVX512_BF16 void gemv_bf16_avx512(const uint16_t* x, const uint16_t* w, int64_t n, int64_t k,
                                         const float* bias, float* out) {
  __m512 acc[1][4];
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    for (int j = 0; j < 4; ++j) acc[0][j] = gemv_row(x, w + (c + j) * k, k);
    store_tile<1, 4>(acc, bias == nullptr ? nullptr : bias + c, out + c, 0);
  }
  for (; c < n; ++c) {  // the n % 4 rest, one output each
    const __m512 one[1][1] = {{gemv_row(x, w + c * k, k)}};
    store_tile<1, 1>(one, bias == nullptr ? nullptr : bias + c, out + c, 0);
  }
}

namespace {

template <int R>
STRATA_AVX512_BF16 void row_block(int64_t cols, const uint16_t* x, const uint16_t* w, int64_t k,
                                  const PrefetchRange& pf, const float* bias, float* out,
                                  int64_t ldo) {
  switch (cols) {
    case 6:
      return dot_tile<R, 6>(x, w, k, pf, bias, out, ldo);
    case 5:
      return dot_tile<R, 5>(x, w, k, pf, bias, out, ldo);
    case 4:
      return dot_tile<R, 4>(x, w, k, pf, bias, out, ldo);
    case 3:
      return dot_tile<R, 3>(x, w, k, pf, bias, out, ldo);
    case 2:
      return dot_tile<R, 2>(x, w, k, pf, bias, out, ldo);
    default:
      return dot_tile<R, 1>(x, w, k, pf, bias, out, ldo);
  }
}

}  // namespace

STRATA_AVX512_BF16 void round_rows_to_bf16(const float* x, int64_t ldx, int64_t m, int64_t k,
                                           uint16_t* out, int64_t ldo) {
  for (int64_t r = 0; r < m; ++r) {
    const float* src = x + r * ldx;
    uint16_t* dst = out + r * ldo;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)h);
    }
    if (i < k) {
      const auto mask = static_cast<__mmask16>((1u << (k - i)) - 1u);
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
      _mm256_mask_storeu_epi16(dst + i, mask, (__m256i)h);
      i = k;
    }
    std::memset(dst + k, 0, static_cast<size_t>(ldo - k) * sizeof(uint16_t));
  }
}

STRATA_AVX512_BF16 void pack_rows_to_bf16(const float* x, int64_t ldx, int64_t r0, int64_t r1,
                                          int64_t k, uint16_t* out, int64_t ldo) {
  const int64_t steps = ldo / kStep;
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = x + r * ldx;
    uint16_t* dst = out + (r / kRows) * kRows * ldo + (r % kRows) * kStep;
    for (int64_t s = 0; s < steps; ++s, dst += kRows * kStep) {
      // Two halves of 16, each vcvtneps2bf16 as round_rows_to_bf16 does: the same bits.
      for (int64_t h = 0; h < kStep; h += 16) {
        const int64_t i = s * kStep + h;
        const int64_t valid = std::clamp<int64_t>(k - i, 0, 16);
        const auto mask = static_cast<__mmask16>((1u << valid) - 1u);
        const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + h), (__m256i)b);
      }
    }
  }
}

// Columns outer, rows inner (linear_avx512.cc's order): a group of kCols weight rows stays in L1
// while the row tiles of x stream past it, each one contiguous run (packed); full 4-row tiles in
// serpentine order, then the m % 4 rest.
STRATA_AVX512_BF16 void matmul_nt_bf16_avx512(const uint16_t* x, int64_t ldx, int64_t m,
                                              const uint16_t* w, int64_t n, int64_t k,
                                              const float* bias, float* out, int64_t ldo) {
  const int64_t tiles = (m + kRows - 1) / kRows;
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t group_lines = kCols * ((row_bytes + 63) / 64);
  const int64_t lines_per_tile = (group_lines + tiles - 1) / tiles;
  const int64_t full_tiles = m / kRows;
  for (int64_t c = 0; c < n; c += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, n - c);
    const uint16_t* wc = w + c * k;
    const float* bc = bias == nullptr ? nullptr : bias + c;
    // uintptr_t: the next group's address only feeds prefetches and may lie past the weights.
    const auto* next_group = reinterpret_cast<const char*>(
        reinterpret_cast<uintptr_t>(wc) + static_cast<uintptr_t>(kCols * row_bytes));
    const bool backward = (c / kCols) % 2 == 1;
    for (int64_t t = 0; t < full_tiles; ++t) {
      const int64_t r = (backward ? full_tiles - 1 - t : t) * kRows;
      const PrefetchRange pf{next_group, t * lines_per_tile, lines_per_tile, row_bytes};
      row_block<kRows>(cols, x + r * ldx, wc, k, pf, bc, out + r * ldo + c, ldo);
    }
    const int64_t r = full_tiles * kRows;
    const PrefetchRange rest{next_group, full_tiles * lines_per_tile, lines_per_tile, row_bytes};
    switch (m - r) {
      case 3:
        row_block<3>(cols, x + r * ldx, wc, k, rest, bc, out + r * ldo + c, ldo);
        break;
      case 2:
        row_block<2>(cols, x + r * ldx, wc, k, rest, bc, out + r * ldo + c, ldo);
        break;
      case 1:
        row_block<1>(cols, x + r * ldx, wc, k, rest, bc, out + r * ldo + c, ldo);
        break;
      default:
        break;
    }
  }
}

#else  // not x86-64: the dispatcher never selects this path

void round_rows_to_bf16(const float*, int64_t, int64_t, int64_t, uint16_t*, int64_t) {
  STRATA_CHECK(false, "round_rows_to_bf16: not an x86-64 build");
}

void pack_rows_to_bf16(const float*, int64_t, int64_t, int64_t, int64_t, uint16_t*, int64_t) {
  STRATA_CHECK(false, "pack_rows_to_bf16: not an x86-64 build");
}

void gemv_bf16_avx512(const uint16_t*, const uint16_t*, int64_t, int64_t, const float*, float*) {
  STRATA_CHECK(false, "gemv_bf16_avx512: not an x86-64 build");
}

void matmul_nt_bf16_avx512(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t,
                           const float*, float*, int64_t) {
  STRATA_CHECK(false, "matmul_nt_bf16_avx512: not an x86-64 build");
}

#endif

}  // namespace strata::cpu::detail

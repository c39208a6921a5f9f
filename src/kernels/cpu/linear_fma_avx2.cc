#include "kernels/cpu/linear_fma_avx2.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/cpu_common.h"

namespace strata::cpu::detail {

#if defined(__x86_64__) || defined(__i386__)
namespace {

constexpr int kRows = 3;  // rows of x per register tile
constexpr int kCols = 4;  // rows of W per register tile: 12 accumulators + 3 x + 1 w = 16 ymm

// How one weight dtype is read: 8 elements widened to fp32 in a register.
struct F32Weights {
  using T = float;
  STRATA_FMA_AVX2 static __m256 load8(const T* p) { return _mm256_loadu_ps(p); }
};

struct Bf16Weights {
  using T = uint16_t;
  STRATA_FMA_AVX2 static __m256 load8(const T* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

struct F16Weights {
  using T = uint16_t;
  STRATA_FMA_AVX2 static __m256 load8(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

// The first `tail` (1..7) elements of a weight row's last step, the rest zero: copied to a
// zeroed buffer so that nothing past the row is read.
template <class W>
STRATA_FMA_AVX2 __m256 load_tail(const typename W::T* p, int64_t tail) {
  typename W::T buf[kLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(tail) * sizeof(typename W::T));
  return W::load8(buf);
}

STRATA_FMA_AVX2 void store_output(__m256 acc, const float* bias, int c, float* out) {
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc);
  const float s = reduce_lanes(lanes);
  *out = bias != nullptr ? s + bias[c] : s;
}

// An R x C tile with the weights widened in registers, accumulators in registers over all of k.
// `ahead` is where the next tile's weight rows start: each step prefetches the share of them that
// it reads of its own rows, so a 1 x 4 decode tile keeps a tile's worth of DRAM reads in flight
// (prefetches never fault, so ahead may point past the weights).
template <class W, int R, int C>
STRATA_FMA_AVX2 void register_tile(const float* x, int64_t ldx, const typename W::T* w, int64_t k,
                                   const float* bias, float* out, int64_t ldo) {
  const char* ahead = reinterpret_cast<const char*>(w + C * k);
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
      const __m256 wv = W::load8(w + c * k + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (i < k) {
    const __m256i mask = lanes_below(k - i);
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_maskload_ps(x + r * ldx + i, mask);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = load_tail<W>(w + c * k + i, k - i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) store_output(acc[r][c], bias, c, out + r * ldo + c);
  }
}

template <class W, int R>
STRATA_FMA_AVX2 void register_row_block(int64_t cols, const float* x, int64_t ldx,
                                        const typename W::T* w, int64_t k, const float* bias,
                                        float* out, int64_t ldo) {
  switch (cols) {
    case 4:
      return register_tile<W, R, 4>(x, ldx, w, k, bias, out, ldo);
    case 3:
      return register_tile<W, R, 3>(x, ldx, w, k, bias, out, ldo);
    case 2:
      return register_tile<W, R, 2>(x, ldx, w, k, bias, out, ldo);
    default:
      return register_tile<W, R, 1>(x, ldx, w, k, bias, out, ldo);
  }
}

// Few rows of x (a decode step): each weight is read once, widened in registers.
template <class W>
STRATA_FMA_AVX2 void matmul_registers(const float* x, int64_t ldx, int64_t m,
                                      const typename W::T* w, int64_t n, int64_t k,
                                      const float* bias, float* out, int64_t ldo) {
  static_assert(kCols == 4 && kRows == 3, "the switches cover 1..3 rows and 1..4 columns");
  for (int64_t c = 0; c < n; c += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, n - c);
    const float* b = bias == nullptr ? nullptr : bias + c;
    for (int64_t r = 0; r < m; r += kRows) {
      const float* xr = x + r * ldx;
      float* o = out + r * ldo + c;
      switch (std::min<int64_t>(kRows, m - r)) {
        case 3:
          register_row_block<W, 3>(cols, xr, ldx, w + c * k, k, b, o, ldo);
          break;
        case 2:
          register_row_block<W, 2>(cols, xr, ldx, w + c * k, k, b, o, ldo);
          break;
        default:
          register_row_block<W, 1>(cols, xr, ldx, w + c * k, k, b, o, ldo);
          break;
      }
    }
  }
}

// One k-block of an R x C tile against the slab: acc (rows kFmaAvx2GroupCols * 8 floats apart,
// one 8-float accumulator per column) += x[:, 0..len) . slab[:, 0..len), len = 8 * steps + tail;
// the slab's columns past len are zero, so the last step reads x masked and the slab as it is.
template <int R, int C>
STRATA_FMA_AVX2 void slab_tile(const float* x, int64_t ldx, int64_t steps, int64_t tail,
                               const float* slab, float* acc_mem) {
  constexpr int64_t kAccRow = kFmaAvx2GroupCols * kLanes;
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_loadu_ps(acc_mem + r * kAccRow + c * kLanes);
  }
  for (int64_t s = 0; s < steps; ++s) {
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + s * kLanes);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_load_ps(slab + c * kFmaAvx2KBlock + s * kLanes);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (tail > 0) {
    const __m256i mask = lanes_below(tail);
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_maskload_ps(x + r * ldx + steps * kLanes, mask);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_load_ps(slab + c * kFmaAvx2KBlock + steps * kLanes);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc_mem + r * kAccRow + c * kLanes, acc[r][c]);
  }
}

template <int R>
STRATA_FMA_AVX2 void slab_row_block(int64_t cols, const float* x, int64_t ldx, int64_t steps,
                                    int64_t tail, const float* slab, float* acc_mem) {
  switch (cols) {
    case 4:
      return slab_tile<R, 4>(x, ldx, steps, tail, slab, acc_mem);
    case 3:
      return slab_tile<R, 3>(x, ldx, steps, tail, slab, acc_mem);
    case 2:
      return slab_tile<R, 2>(x, ldx, steps, tail, slab, acc_mem);
    default:
      return slab_tile<R, 1>(x, ldx, steps, tail, slab, acc_mem);
  }
}

// Rows [0, rows) of W, columns [k0, k0 + len) widened to fp32 in `slab` (rows kFmaAvx2KBlock
// apart), zero from len up to the next multiple of 8.
template <class W>
STRATA_FMA_AVX2 void widen_slab(const typename W::T* w, int64_t k, int64_t rows, int64_t k0,
                                int64_t len, float* slab) {
  for (int64_t r = 0; r < rows; ++r) {
    const typename W::T* src = w + r * k + k0;
    float* dst = slab + r * kFmaAvx2KBlock;
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) _mm256_store_ps(dst + i, W::load8(src + i));
    if (i < len) _mm256_store_ps(dst + i, load_tail<W>(src + i, len - i));
  }
}

// Many rows of x (a prefill, many streams): per group of kFmaAvx2GroupCols weight rows, per
// k-block, the group's slab is widened once and read by every row of x in 3 x 4 tiles (the rows
// of x of one tile stay in L1 across the group's four column tiles, the 16 KB slab across all
// row tiles).
template <class W>
STRATA_FMA_AVX2 void matmul_slabs(const float* x, int64_t ldx, int64_t m, const typename W::T* w,
                                  int64_t n, int64_t k, const float* bias, float* out,
                                  int64_t ldo) {
  constexpr int64_t kGroup = kFmaAvx2GroupCols;
  struct alignas(32) Block {
    float v[kGroup * kFmaAvx2KBlock];
  };
  thread_local std::vector<Block> slab(1);
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(m * kGroup * kLanes));
  float* s = slab[0].v;
  for (int64_t c0 = 0; c0 < n; c0 += kGroup) {
    const int64_t group_cols = std::min(kGroup, n - c0);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t k0 = 0; k0 < k; k0 += kFmaAvx2KBlock) {
      const int64_t len = std::min(kFmaAvx2KBlock, k - k0);
      widen_slab<W>(w + c0 * k, k, group_cols, k0, len, s);
      const int64_t steps = len / kLanes;
      const int64_t tail = len % kLanes;
      // The weights of the next slab (the next k-block, or the next group's first) come from
      // DRAM for any matrix beyond L2: the row tiles prefetch them in equal shares, so they
      // arrive while this slab computes instead of stalling its widening.
      const bool last_block = k0 + kFmaAvx2KBlock >= k;
      const int64_t next_c0 = last_block ? c0 + kGroup : c0;
      const int64_t next_k0 = last_block ? 0 : k0 + kFmaAvx2KBlock;
      const int64_t next_rows = next_c0 < n ? std::min(kGroup, n - next_c0) : 0;
      const int64_t line_elems = 64 / static_cast<int64_t>(sizeof(typename W::T));
      const int64_t next_lines =
          (std::min(kFmaAvx2KBlock, k - next_k0) + line_elems - 1) / line_elems;
      const int64_t pf_total = next_rows * next_lines;
      const int64_t row_tiles = (m + kRows - 1) / kRows;
      const int64_t pf_share = (pf_total + row_tiles - 1) / row_tiles;
      int64_t pf_next = 0;
      int64_t pf_row = 0;
      int64_t pf_line = 0;
      for (int64_t r = 0, rows = 0; r < m; r += rows) {
        // 3-row tiles, the last four rows as two of 2: a 1-row tile has 4 accumulator chains
        // for an FMA latency of 4 on 2 pipes and runs at half the rate.
        rows = m - r == 4 ? 2 : std::min<int64_t>(kRows, m - r);
        for (const int64_t pf_end = std::min(pf_total, pf_next + pf_share); pf_next < pf_end;
             ++pf_next) {
          _mm_prefetch(reinterpret_cast<const char*>(w + (next_c0 + pf_row) * k + next_k0 +
                                                     pf_line * line_elems),
                       _MM_HINT_T0);
          if (++pf_line == next_lines) {
            pf_line = 0;
            ++pf_row;
          }
        }
        const float* xr = x + r * ldx + k0;
        for (int64_t c = 0; c < group_cols; c += kCols) {
          const int64_t cols = std::min<int64_t>(kCols, group_cols - c);
          float* a = acc.data() + (r * kGroup + c) * kLanes;
          const float* sc = s + c * kFmaAvx2KBlock;
          switch (rows) {
            case 3:
              slab_row_block<3>(cols, xr, ldx, steps, tail, sc, a);
              break;
            case 2:
              slab_row_block<2>(cols, xr, ldx, steps, tail, sc, a);
              break;
            default:
              slab_row_block<1>(cols, xr, ldx, steps, tail, sc, a);
              break;
          }
        }
      }
    }
    for (int64_t r = 0; r < m; ++r) {
      const float* a = acc.data() + r * kGroup * kLanes;
      const float* b = bias == nullptr ? nullptr : bias + c0;
      float* o = out + r * ldo + c0;
      int64_t c = 0;
      for (; c + kLanes <= group_cols; c += kLanes) {
        __m256 eight[kLanes];
        for (int j = 0; j < kLanes; ++j) eight[j] = _mm256_loadu_ps(a + (c + j) * kLanes);
        reduce8(eight, b == nullptr ? nullptr : b + c, o + c, 0, kLanes);
      }
      for (; c < group_cols; ++c) {
        const float sum = reduce_lanes(a + c * kLanes);
        o[c] = b != nullptr ? sum + b[c] : sum;
      }
    }
  }
}

template <class W>
void matmul(const float* x, int64_t ldx, int64_t m, const void* w, int64_t n, int64_t k,
            const float* bias, float* out, int64_t ldo) {
  const auto* wt = static_cast<const typename W::T*>(w);
  if (m < kFmaAvx2MinSlabRows) return matmul_registers<W>(x, ldx, m, wt, n, k, bias, out, ldo);
  matmul_slabs<W>(x, ldx, m, wt, n, k, bias, out, ldo);
}

}  // namespace

void matmul_nt_fma_avx2(const float* x, int64_t ldx, int64_t m, const void* w, DType dtype,
                        int64_t n, int64_t k, const float* bias, float* out, int64_t ldo) {
  switch (dtype) {
    case DType::kF32:
      return matmul<F32Weights>(x, ldx, m, w, n, k, bias, out, ldo);
    case DType::kBF16:
      return matmul<Bf16Weights>(x, ldx, m, w, n, k, bias, out, ldo);
    case DType::kF16:
      return matmul<F16Weights>(x, ldx, m, w, n, k, bias, out, ldo);
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
  STRATA_CHECK(false, "matmul_nt_fma_avx2: weight dtype is not F32, BF16 or F16");
}

#else  // not x86: the dispatcher never selects this path

void matmul_nt_fma_avx2(const float*, int64_t, int64_t, const void*, DType, int64_t, int64_t,
                        const float*, float*, int64_t) {
  STRATA_CHECK(false, "matmul_nt_fma_avx2: not an x86 build");
}

#endif

}  // namespace strata::cpu::detail

#include "kernels/cpu/attention_avx2.h"

#include <cmath>

#include "core/check.h"
#include "kernels/cpu/avx2_common.h"

namespace strata::cpu::detail {

#if defined(__x86_64__)
namespace {

// H heads x V 8-channel vectors starting at channel c; each V load is shared by H heads.
template <int H, int V>
STRATA_FMA_AVX2 void pv_tile(const float* const* w, const float* v, int64_t ldv, int32_t count,
                             int32_t c, float* const* acc) {
  __m256 part[H][V];
  for (int h = 0; h < H; ++h) {
    for (int q = 0; q < V; ++q) part[h][q] = _mm256_setzero_ps();
  }
  int32_t j = 0;
  do {  // count >= 1 (see scores_tile)
    const float* vj = v + j * ldv + c;
    __m256 vv[V];
    for (int q = 0; q < V; ++q) vv[q] = _mm256_loadu_ps(vj + 8 * q);
    for (int h = 0; h < H; ++h) {
      const __m256 wj = _mm256_broadcast_ss(w[h] + j);
      for (int q = 0; q < V; ++q) part[h][q] = _mm256_fmadd_ps(wj, vv[q], part[h][q]);
    }
  } while (++j < count);
  for (int h = 0; h < H; ++h) {
    for (int q = 0; q < V; ++q) {
      float* a = acc[h] + c + 8 * q;
      _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), part[h][q]));
    }
  }
}

template <int H>
STRATA_FMA_AVX2 void pv_heads(const float* const* w, const float* v, int64_t ldv, int32_t count,
                              int32_t d, float* const* acc) {
  int32_t c = 0;
  for (; c + 16 <= d; c += 16) pv_tile<H, 2>(w, v, ldv, count, c, acc);
  for (; c + 8 <= d; c += 8) pv_tile<H, 1>(w, v, ldv, count, c, acc);
  for (; c < d; ++c) {
    for (int h = 0; h < H; ++h) {
      float part = 0.0f;
      for (int32_t j = 0; j < count; ++j) part = std::fma(w[h][j], v[j * ldv + c], part);
      acc[h][c] += part;
    }
  }
}

// The 8 x 8 block k[j * ldk + i] (j, i < 8) transposed into kt[i * ldt + j].
STRATA_FMA_AVX2 void transpose8x8(const float* k, int64_t ldk, float* kt, int32_t ldt) {
  __m256 r[8], t[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(k + j * ldk);
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  // r[4 * h + q]: lanes of rows 4h..4h+3 for channels q and q + 4 (q < 4), per 128-bit half.
  for (int h = 0; h < 2; ++h) {
    const __m256 a = t[4 * h], b = t[4 * h + 1], c = t[4 * h + 2], e = t[4 * h + 3];
    r[4 * h + 0] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * h + 1] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * h + 2] = _mm256_shuffle_ps(b, e, _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * h + 3] = _mm256_shuffle_ps(b, e, _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_ps(kt + q * ldt, _mm256_permute2f128_ps(r[q], r[4 + q], 0x20));
    _mm256_storeu_ps(kt + (q + 4) * ldt, _mm256_permute2f128_ps(r[q], r[4 + q], 0x31));
  }
}

// Head-dim elements per partial chain of a score (attention_avx2.h).
constexpr int32_t kScoreChain = 16;

// R rows x V 8-key vectors of scores from key j0 on: per kScoreChain head-dim elements one chain
// in registers, added to the partial sum kept in the scores row (L1), scaled at the last; the
// last vector's keys past count are neither read nor written.
template <int R, int V>
STRATA_FMA_AVX2 void scores_tile(const float* q, int64_t ldq, const float* kt, int32_t ldt,
                                 int32_t j0, int32_t count, int32_t d, float scale, float* scores,
                                 int64_t lds) {
  const int32_t left = count - j0 - 8 * (V - 1);  // keys of the last vector
  const __m256i last = lanes_below(left < 8 ? left : 8);
  const __m256 sc = _mm256_set1_ps(scale);
  for (int32_t i0 = 0; i0 < d; i0 += kScoreChain) {
    const int32_t i1 = i0 + kScoreChain < d ? i0 + kScoreChain : d;
    __m256 acc[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
    }
    int32_t i = i0;
    do {  // a loop the compiler knows runs keeps acc in registers, not stored every step
      __m256 kv[V];
      for (int v = 0; v < V; ++v) kv[v] = _mm256_loadu_ps(kt + i * ldt + j0 + 8 * v);
      for (int r = 0; r < R; ++r) {
        const __m256 qb = _mm256_broadcast_ss(q + r * ldq + i);
        for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(qb, kv[v], acc[r][v]);
      }
    } while (++i < i1);
    const bool first = i0 == 0, final = i1 == d;
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) {
        float* out = scores + r * lds + j0 + 8 * v;
        const bool full = v + 1 < V;
        __m256 x = acc[r][v];
        if (!first)
          x = _mm256_add_ps(full ? _mm256_loadu_ps(out) : _mm256_maskload_ps(out, last), x);
        if (final) x = _mm256_mul_ps(x, sc);
        if (full) {
          _mm256_storeu_ps(out, x);
        } else {
          _mm256_maskstore_ps(out, last, x);
        }
      }
    }
  }
}

template <int V>
STRATA_FMA_AVX2 void scores_rows(const float* q, int64_t ldq, int64_t rows, const float* kt,
                                 int32_t ldt, int32_t j0, int32_t count, int32_t d, float scale,
                                 float* scores, int64_t lds) {
  int64_t r = 0;
  for (; r + 6 <= rows; r += 6) {
    scores_tile<6, V>(q + r * ldq, ldq, kt, ldt, j0, count, d, scale, scores + r * lds, lds);
  }
  const float* qr = q + r * ldq;
  float* sr = scores + r * lds;
  switch (rows - r) {
    case 5:
      return scores_tile<5, V>(qr, ldq, kt, ldt, j0, count, d, scale, sr, lds);
    case 4:
      return scores_tile<4, V>(qr, ldq, kt, ldt, j0, count, d, scale, sr, lds);
    case 3:
      return scores_tile<3, V>(qr, ldq, kt, ldt, j0, count, d, scale, sr, lds);
    case 2:
      return scores_tile<2, V>(qr, ldq, kt, ldt, j0, count, d, scale, sr, lds);
    case 1:
      return scores_tile<1, V>(qr, ldq, kt, ldt, j0, count, d, scale, sr, lds);
    default:
      return;
  }
}

}  // namespace

void transpose_keys_avx2(const float* k, int64_t ldk, int32_t count, int32_t d, float* kt) {
  const int32_t ldt = transposed_keys_stride(count);
  int32_t j = 0;
  for (; j + 8 <= count; j += 8) {
    int32_t i = 0;
    for (; i + 8 <= d; i += 8) transpose8x8(k + j * ldk + i, ldk, kt + i * ldt + j, ldt);
    for (; i < d; ++i) {
      for (int32_t l = 0; l < 8; ++l) kt[i * ldt + j + l] = k[(j + l) * ldk + i];
    }
  }
  if (j < count) {
    for (int32_t i = 0; i < d; ++i) {
      for (int32_t l = j; l < ldt; ++l) kt[i * ldt + l] = l < count ? k[l * ldk + i] : 0.0f;
    }
  }
}

void scores_avx2(const float* q, int64_t ldq, int64_t rows, const float* kt, int32_t count,
                 int32_t d, float scale, float* scores, int64_t lds) {
  const int32_t ldt = transposed_keys_stride(count);
  int32_t j = 0;
  for (; j + 8 < count; j += 16) {
    scores_rows<2>(q, ldq, rows, kt, ldt, j, count, d, scale, scores, lds);
  }
  if (j < count) scores_rows<1>(q, ldq, rows, kt, ldt, j, count, d, scale, scores, lds);
}

STRATA_FMA_AVX2 float max_avx2(const float* x, int32_t count) {
  __m256 m = _mm256_set1_ps(x[0]);
  int32_t j = 0;
  for (; j + 8 <= count; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float best = lanes[0];
  for (int l = 1; l < 8; ++l) best = lanes[l] > best ? lanes[l] : best;
  for (; j < count; ++j) best = x[j] > best ? x[j] : best;
  return best;
}

void accumulate_pv_avx2(const float* const* w, int32_t num_heads, const float* v, int64_t ldv,
                        int32_t count, int32_t d, float* const* acc) {
  if (count < 1) return;
  int32_t h = 0;
  for (; h + 4 <= num_heads; h += 4) pv_heads<4>(w + h, v, ldv, count, d, acc + h);
  switch (num_heads - h) {
    case 3:
      return pv_heads<3>(w + h, v, ldv, count, d, acc + h);
    case 2:
      return pv_heads<2>(w + h, v, ldv, count, d, acc + h);
    case 1:
      return pv_heads<1>(w + h, v, ldv, count, d, acc + h);
    default:
      return;
  }
}

#else  // not x86-64: the dispatcher never selects this path

void transpose_keys_avx2(const float*, int64_t, int32_t, int32_t, float*) {
  STRATA_CHECK(false, "transpose_keys_avx2: not an x86-64 build");
}

void scores_avx2(const float*, int64_t, int64_t, const float*, int32_t, int32_t, float, float*,
                 int64_t) {
  STRATA_CHECK(false, "scores_avx2: not an x86-64 build");
}

float max_avx2(const float*, int32_t) {
  STRATA_CHECK(false, "max_avx2: not an x86-64 build");
  return 0.0f;
}

void accumulate_pv_avx2(const float* const*, int32_t, const float*, int64_t, int32_t, int32_t,
                        float* const*) {
  STRATA_CHECK(false, "accumulate_pv_avx2: not an x86-64 build");
}

#endif

}  // namespace strata::cpu::detail

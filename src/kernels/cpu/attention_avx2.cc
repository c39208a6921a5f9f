#include "kernels/cpu/attention_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/check.h"

namespace strata::cpu::detail {

#if defined(__x86_64__)
namespace {

// No "fma" on purpose: the portable path multiplies and adds separately.
#define STRATA_AVX2 __attribute__((target("avx2")))

// H heads x V 8-channel vectors starting at channel c; each V load is shared by H heads.
template <int H, int V>
STRATA_AVX2 void pv_tile(const float* const* w, const float* v, int64_t ldv, int32_t count,
                         int32_t c, float* const* acc) {
  __m256 part[H][V];
  for (int h = 0; h < H; ++h) {
    for (int q = 0; q < V; ++q) part[h][q] = _mm256_setzero_ps();
  }
  for (int32_t j = 0; j < count; ++j) {
    const float* vj = v + j * ldv + c;
    __m256 vv[V];
    for (int q = 0; q < V; ++q) vv[q] = _mm256_loadu_ps(vj + 8 * q);
    for (int h = 0; h < H; ++h) {
      const __m256 wj = _mm256_set1_ps(w[h][j]);
      for (int q = 0; q < V; ++q) part[h][q] = _mm256_add_ps(part[h][q], _mm256_mul_ps(wj, vv[q]));
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int q = 0; q < V; ++q) {
      float* a = acc[h] + c + 8 * q;
      _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), part[h][q]));
    }
  }
}

template <int H>
STRATA_AVX2 void pv_heads(const float* const* w, const float* v, int64_t ldv, int32_t count,
                          int32_t d, float* const* acc) {
  int32_t c = 0;
  for (; c + 16 <= d; c += 16) pv_tile<H, 2>(w, v, ldv, count, c, acc);
  for (; c + 8 <= d; c += 8) pv_tile<H, 1>(w, v, ldv, count, c, acc);
  for (; c < d; ++c) {
    for (int h = 0; h < H; ++h) {
      float part = 0.0f;
      for (int32_t j = 0; j < count; ++j) part += w[h][j] * v[j * ldv + c];
      acc[h][c] += part;
    }
  }
}

}  // namespace

STRATA_AVX2 float max_avx2(const float* x, int32_t count) {
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

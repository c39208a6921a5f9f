#include "kernels/cpu/attention_avx512.h"

#include "kernels/cpu/avx512_target.h"

#include <algorithm>

#include "core/check.h"

namespace strata::cpu::detail {

#if defined(__x86_64__)
namespace {

// H heads x V 16-channel vectors starting at channel c; `last` masks the final vector (the
// head_dim % 16 tail, or all lanes). Each V load is shared by H heads.
template <int H, int V>
STRATA_AVX512 void pv_tile(const float* const* w, const float* v, int64_t ldv, int32_t count,
                           int32_t c, __mmask16 last, float* const* acc) {
  __m512 part[H][V];
  for (int h = 0; h < H; ++h) {
    for (int q = 0; q < V; ++q) part[h][q] = _mm512_setzero_ps();
  }
  for (int32_t j = 0; j < count; ++j) {
    const float* vj = v + j * ldv + c;
    __m512 vv[V];
    for (int q = 0; q < V; ++q) {
      vv[q] = q + 1 < V ? _mm512_loadu_ps(vj + 16 * q) : _mm512_maskz_loadu_ps(last, vj + 16 * q);
    }
    for (int h = 0; h < H; ++h) {
      const __m512 wj = _mm512_set1_ps(w[h][j]);
      for (int q = 0; q < V; ++q) part[h][q] = _mm512_fmadd_ps(wj, vv[q], part[h][q]);
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int q = 0; q < V; ++q) {
      const __mmask16 mask = q + 1 < V ? __mmask16{0xFFFF} : last;
      float* a = acc[h] + c + 16 * q;
      _mm512_mask_storeu_ps(a, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, a), part[h][q]));
    }
  }
}

template <int H>
STRATA_AVX512 void pv_heads(const float* const* w, const float* v, int64_t ldv, int32_t count,
                            int32_t d, float* const* acc) {
  int32_t c = 0;
  for (; c + 64 <= d; c += 64) pv_tile<H, 4>(w, v, ldv, count, c, 0xFFFF, acc);
  while (c < d) {
    const int32_t left = std::min<int32_t>(16, d - c);
    const auto last = static_cast<__mmask16>((1u << left) - 1u);
    pv_tile<H, 1>(w, v, ldv, count, c, last, acc);
    c += left;
  }
}

}  // namespace

void accumulate_pv_avx512(const float* const* w, int32_t num_heads, const float* v, int64_t ldv,
                          int32_t count, int32_t d, float* const* acc) {
  int32_t h = 0;
  for (; h + 4 <= num_heads; h += 4) pv_heads<4>(w + h, v, ldv, count, d, acc + h);
  switch (num_heads - h) {
    case 3: return pv_heads<3>(w + h, v, ldv, count, d, acc + h);
    case 2: return pv_heads<2>(w + h, v, ldv, count, d, acc + h);
    case 1: return pv_heads<1>(w + h, v, ldv, count, d, acc + h);
    default: return;
  }
}

#else  // not x86-64: the dispatcher never selects this path

void accumulate_pv_avx512(const float* const*, int32_t, const float*, int64_t, int32_t, int32_t,
                          float* const*) {
  STRATA_CHECK(false, "accumulate_pv_avx512: not an x86-64 build");
}

#endif

}  // namespace strata::cpu::detail

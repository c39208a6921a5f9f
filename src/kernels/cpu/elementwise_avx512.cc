#include "kernels/cpu/elementwise_avx512.h"

#include "kernels/cpu/avx512_target.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/exp_poly.h"

namespace strata::cpu::detail {

#if defined(__x86_64__)
namespace {

STRATA_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpMin)), _mm512_set1_ps(kExpMax));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (size_t i = 1; i < kExpPoly.size(); ++i)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

STRATA_AVX512 inline __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u);
}

STRATA_AVX512 void silu_and_mul_impl(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, silu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(
        out + i, mask,
        silu_mul16(_mm512_maskz_loadu_ps(mask, gate + i), _mm512_maskz_loadu_ps(mask, up + i)));
  }
}

STRATA_AVX512 float exp_sub_and_sum_impl(float* x, int32_t count, float max) {
  const __m512 m = _mm512_set1_ps(max);
  for (int32_t j = 0; j < count; j += 16) {
    const auto mask = static_cast<__mmask16>(count - j >= 16 ? 0xFFFFu : (1u << (count - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + j);
    _mm512_mask_storeu_ps(x + j, mask, exp16(_mm512_sub_ps(v, m)));
  }
  float sum = 0.0f;
  for (int32_t j = 0; j < count; ++j) sum += x[j];
  return sum;
}

STRATA_AVX512 float max_impl(const float* x, int32_t count) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int32_t j = 0;
  for (; j + 16 <= count; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + j));
  if (j < count) {
    const auto mask = static_cast<__mmask16>((1u << (count - j)) - 1u);
    m = _mm512_mask_max_ps(m, mask, m, _mm512_maskz_loadu_ps(mask, x + j));
  }
  return _mm512_reduce_max_ps(m);
}

}  // namespace

void silu_and_mul_avx512(const float* gate, const float* up, float* out, int64_t n) {
  silu_and_mul_impl(gate, up, out, n);
}

float exp_sub_and_sum_avx512(float* x, int32_t count, float max) {
  return exp_sub_and_sum_impl(x, count, max);
}

float max_avx512(const float* x, int32_t count) { return max_impl(x, count); }

#else  // not x86-64: the dispatchers never select these

void silu_and_mul_avx512(const float*, const float*, float*, int64_t) {
  STRATA_CHECK(false, "silu_and_mul_avx512: not an x86-64 build");
}

float exp_sub_and_sum_avx512(float*, int32_t, float) {
  STRATA_CHECK(false, "exp_sub_and_sum_avx512: not an x86-64 build");
  return 0.0f;
}

float max_avx512(const float*, int32_t) {
  STRATA_CHECK(false, "max_avx512: not an x86-64 build");
  return 0.0f;
}

#endif

}  // namespace strata::cpu::detail

#include "kernels/cpu/elementwise_avx2.h"

#include "core/check.h"
#include "kernels/cpu/avx2_common.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/exp_poly.h"

namespace strata::cpu::detail {

#if defined(__x86_64__)
namespace {

// 2^e for integer lanes e in [-126, 127], built from the exponent bits.
STRATA_FMA_AVX2 inline __m256 pow2(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

STRATA_FMA_AVX2 inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpMin)), _mm256_set1_ps(kExpMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (size_t i = 1; i < kExpPoly.size(); ++i)
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n in [-150, 128]: both halves lie in [-75, 64].
  const __m256i e = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(e, 1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2(half)), pow2(_mm256_sub_epi32(e, half)));
}

STRATA_FMA_AVX2 inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

STRATA_FMA_AVX2 void silu_and_mul_impl(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256i mask = lanes_below(n - i);
    _mm256_maskstore_ps(
        out + i, mask,
        silu_mul8(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask)));
  }
}

STRATA_FMA_AVX2 float exp_sub_and_sum_impl(float* x, int32_t count, float max) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 sum = _mm256_setzero_ps();
  int32_t j = 0;
  for (; j + 8 <= count; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), m));
    _mm256_storeu_ps(x + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < count) {
    const __m256i mask = lanes_below(count - j);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + j, mask), m));
    _mm256_maskstore_ps(x + j, mask, e);
    sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(mask)));
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, sum);
  return reduce_lanes(lanes);
}

}  // namespace

void silu_and_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  silu_and_mul_impl(gate, up, out, n);
}

float exp_sub_and_sum_avx2(float* x, int32_t count, float max) {
  return exp_sub_and_sum_impl(x, count, max);
}

#else  // not x86-64: the dispatchers never select these

void silu_and_mul_avx2(const float*, const float*, float*, int64_t) {
  STRATA_CHECK(false, "silu_and_mul_avx2: not an x86-64 build");
}

float exp_sub_and_sum_avx2(float*, int32_t, float) {
  STRATA_CHECK(false, "exp_sub_and_sum_avx2: not an x86-64 build");
  return 0.0f;
}

#endif

}  // namespace strata::cpu::detail

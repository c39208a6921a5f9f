#include "kernels/cpu/kv_quant_avx512.h"

#include "kernels/cpu/avx512_target.h"

#include <limits>

#include "core/check.h"

namespace strata::cpu::detail {

#if defined(__x86_64__)

STRATA_AVX512 void dequantize_int8_avx512(const int8_t* codes, float scale, int64_t n, float* dst) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i < 16 ? n - i : 16;
    const auto mask = static_cast<__mmask16>((1u << left) - 1u);
    const __m128i c = _mm_maskz_loadu_epi8(mask, codes + i);
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c));
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_mul_ps(v, s));
  }
}

// fp8 -> fp16 bit patterns, then vcvtph2ps (exact): e5m2 is the top byte of an fp16;
// e4m3's magnitude shifted left by 7 is an fp16 worth 2^-8 times the e4m3 value (normals and
// subnormals alike), so one exact multiply by 256 restores it. e4m3's NaN codes (S.1111.111)
// would read as 480 that way and are patched to NaN.
STRATA_AVX512 void dequantize_fp8_avx512(const uint8_t* codes, bool e4m3, float scale, int64_t n,
                                         float* dst) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 restore = _mm512_set1_ps(e4m3 ? 256.0f : 1.0f);
  const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i < 16 ? n - i : 16;
    const auto mask = static_cast<__mmask16>((1u << left) - 1u);
    const __m256i c = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(mask, codes + i));
    __m256i h;
    if (e4m3) {
      const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x80)), 8);
      const __m256i mag = _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x7f)), 7);
      h = _mm256_or_si256(sign, mag);
    } else {
      h = _mm256_slli_epi16(c, 8);
    }
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), restore);
    if (e4m3) {
      const __mmask16 is_nan = _mm256_cmpeq_epi16_mask(
          _mm256_and_si256(c, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
      v = _mm512_mask_mov_ps(v, is_nan, nan);
    }
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_mul_ps(v, s));
  }
}

// 16 codes (8 bytes) as 16 fp32 values, exact: each byte widened to 16 bits, its low nibble kept
// in the low byte and its high nibble moved to the high byte, so the 16 bytes read in order are
// the codes of elements 0, 1, 2, ...
STRATA_AVX512 inline __m512 int4_codes_ps(const uint8_t* codes, __mmask16 byte_mask) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_maskz_loadu_epi8(byte_mask, codes));
  const __m128i lo = _mm_and_si128(w, _mm_set1_epi16(0x0f));
  const __m128i hi = _mm_slli_epi16(_mm_srli_epi16(w, 4), 8);
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_or_si128(lo, hi)));
}

STRATA_AVX512 void dequantize_int4_avx512(const uint8_t* codes, const uint16_t* scales,
                                          const uint16_t* zeros, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i < 16 ? n - i : 16;
    const auto mask = static_cast<__mmask16>((1u << left) - 1u);
    const auto byte_mask = static_cast<__mmask16>((1u << (left / 2)) - 1u);
    const __m512 c = int4_codes_ps(codes + i / 2, byte_mask);
    const __m512 s = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, scales + i));
    const __m512 z = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, zeros + i));
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_add_ps(_mm512_mul_ps(c, s), z));
  }
}

STRATA_AVX512 void dequantize_int4_row_avx512(const uint8_t* codes, float scale, float zero,
                                              int64_t n, float* dst) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 z = _mm512_set1_ps(zero);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i < 16 ? n - i : 16;
    const auto mask = static_cast<__mmask16>((1u << left) - 1u);
    const auto byte_mask = static_cast<__mmask16>((1u << (left / 2)) - 1u);
    const __m512 c = int4_codes_ps(codes + i / 2, byte_mask);
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_add_ps(_mm512_mul_ps(c, s), z));
  }
}

#else  // not x86-64: the dispatcher never selects this path

void dequantize_int8_avx512(const int8_t*, float, int64_t, float*) {
  STRATA_CHECK(false, "dequantize_int8_avx512: not an x86-64 build");
}
void dequantize_fp8_avx512(const uint8_t*, bool, float, int64_t, float*) {
  STRATA_CHECK(false, "dequantize_fp8_avx512: not an x86-64 build");
}
void dequantize_int4_avx512(const uint8_t*, const uint16_t*, const uint16_t*, int64_t, float*) {
  STRATA_CHECK(false, "dequantize_int4_avx512: not an x86-64 build");
}
void dequantize_int4_row_avx512(const uint8_t*, float, float, int64_t, float*) {
  STRATA_CHECK(false, "dequantize_int4_row_avx512: not an x86-64 build");
}

#endif

}  // namespace strata::cpu::detail

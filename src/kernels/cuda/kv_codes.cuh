#pragma once
// Quantized KV codes (FP8 E4M3 / E5M2, INT8, INT4; docs/kv-quant.md) turned into fp16 pairs, the
// operands of mma.sync m16n8k16 with f16 inputs. Every conversion is exact: e4m3, e5m2 and the
// integers -127..127 are all fp16 values, so the scales stay outside (folded into the softmax
// scale and the output for FP8, applied to the score and probability columns for INT8) and the
// only roundings are the ones the float kernels make. INT4's per-channel K statistics cannot be
// factored out of Q K^T, so its codes are dequantized in fp16 (code * s + z, one rounding)
// before the products. Internal (.cuh).

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda::detail {

// The four codes of w (byte i = code i) as two f16x2: lo = (code 0, code 1), hi = (code 2,
// code 3), the lower-numbered code in the low half.
template <DType kKv>
__device__ __forceinline__ void codes4_to_f16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  static_assert(is_quantized_kv(kKv));
  if constexpr (kKv == DType::kF8E4M3) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
        " cvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
  } else if constexpr (kKv == DType::kF8E5M2) {
    // An e5m2 code is the high byte of the fp16 with the same value.
    lo = __byte_perm(w, 0u, 0x1404);
    hi = __byte_perm(w, 0u, 0x3424);
  } else {
    // int8 c: the fp16 with bits 0x64 | (c + 128) is 1024 + c + 128; subtracting 1152 is exact.
    const uint32_t u = w ^ 0x80808080u;
    const uint32_t l = __byte_perm(u, 0x64646464u, 0x4140);
    const uint32_t h = __byte_perm(u, 0x64646464u, 0x4342);
    asm("sub.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(l), "r"(0x64806480u));
    asm("sub.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(h), "r"(0x64806480u));
  }
}

// The other way, for operands of the FP8 tensor cores (wgmma.cuh): four floats as four e4m3
// codes (round to nearest, saturated to +-448), v0 in the low byte.
__device__ __forceinline__ uint32_t f32x4_to_e4m3x4(float v0, float v1, float v2, float v3) {
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n mov.b32 %0, {lo, hi};\n}"
      : "=r"(r)
      : "f"(v0), "f"(v1), "f"(v2), "f"(v3));
  return r;
}

// INT4 (KIVI): kBytes packed bytes at p (two codes each, the low nibble the even channel) as
// kBytes / 2 words of byte codes in channel order (word i = channels 4i .. 4i + 3), the form
// codes4_to_f16x2 and u4codes4_to_f16x2 read. p is aligned to kBytes (4, 8 or 16).
template <int kBytes>
__device__ __forceinline__ void load_int4_row(const uint8_t* p, uint32_t* out) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16);
  uint32_t packed[kBytes / 4];
  if constexpr (kBytes == 16) {
    const uint4 x = *reinterpret_cast<const uint4*>(p);
    packed[0] = x.x;
    packed[1] = x.y;
    packed[2] = x.z;
    packed[3] = x.w;
  } else if constexpr (kBytes == 8) {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    packed[0] = x.x;
    packed[1] = x.y;
  } else {
    packed[0] = *reinterpret_cast<const uint32_t*>(p);
  }
#pragma unroll
  for (int i = 0; i < kBytes / 4; ++i) {
    const uint32_t even = packed[i] & 0x0f0f0f0fu;        // channels 0, 2, 4, 6 of the word
    const uint32_t odd = (packed[i] >> 4) & 0x0f0f0f0fu;  // 1, 3, 5, 7
    out[2 * i] = __byte_perm(even, odd, 0x5140);
    out[2 * i + 1] = __byte_perm(even, odd, 0x7362);
  }
}

// Four unsigned 4-bit codes (one per byte, 0..15) as two f16x2 code values, exact: the fp16 with
// bits 0x64 | c is 1024 + c.
__device__ __forceinline__ void u4codes4_to_f16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t l = __byte_perm(w, 0x64646464u, 0x5140);
  const uint32_t h = __byte_perm(w, 0x64646464u, 0x7362);
  asm("sub.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(l), "r"(0x64006400u));
  asm("sub.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(h), "r"(0x64006400u));
}

// code * s + z on fp16 pairs (bit patterns), one rounding: INT4's dequantization feeding the
// fp16 products.
__device__ __forceinline__ uint32_t hfma2_bits(uint32_t code, uint32_t s, uint32_t z) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(code), "r"(s), "r"(z));
  return r;
}

// The token range an attention launch covers. An INT4 cache's query at position p reads logical
// blocks jb > p / B - R from the newest-blocks group's pool and the blocks before from the int4
// codes (docs/kv-quant.md "INT4"); the two ranges run as two launches whose results are merged
// by their log-sum-exps.
enum AttentionPart : int32_t { kWholeRange = 0, kInt4Part = 1, kNewestPart = 2 };

// The query at position pos's int4 keys are [0, int4_keys(pos)); the rest come from the newest
// blocks (R = newest_blocks).
__device__ __forceinline__ int32_t int4_keys(int32_t pos, int32_t block_size,
                                             int32_t newest_blocks) {
  return max(0, pos / block_size - newest_blocks + 1) * block_size;
}

// Two floats as one f16x2 (lo in the low half), rounded to nearest, saturated at +-65504 so a
// large query element never becomes an infinity.
__device__ __forceinline__ uint32_t f16x2_satfinite(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two consecutive 16-bit floats of kDType (bf16 or fp16) as one f16x2, saturated.
template <DType kDType>
__device__ __forceinline__ uint32_t to_f16x2(uint32_t pair) {
  if constexpr (kDType == DType::kF16) {
    return pair;
  } else {
    return f16x2_satfinite(__uint_as_float(pair << 16), __uint_as_float(pair & 0xffff0000u));
  }
}

// An fp16 pair (two INT8 scales) as floats.
__device__ __forceinline__ float2 f16x2_to_float2(uint32_t pair) {
  __half2 h;
  static_assert(sizeof(h) == sizeof(pair));
  memcpy(&h, &pair, sizeof(h));
  return __half22float2(h);
}

// Host side: the scale fields both attention kernels' arguments share (scale_log2, out_scale,
// k_scales, v_scales, scale_block_stride, scale_head_stride, and INT4's k_zeros, v_zeros,
// k_stat_head_stride) from the layer's view: FP8's k_scale folded into the softmax scale (log2
// units) and v_scale into the output, INT8's per-token scale areas, INT4's statistics.
template <typename Args>
inline void set_kv_scale_args(Args& a, const PagedKvCacheView& c, float sm_scale) {
  const bool fp8 = c.dtype == DType::kF8E4M3 || c.dtype == DType::kF8E5M2;
  a.scale_log2 = sm_scale * 1.4426950408889634f * (fp8 ? c.k_scale : 1.0f);
  a.out_scale = fp8 ? c.v_scale : 1.0f;
  a.k_scales = static_cast<const uint16_t*>(c.k_scale_data);
  a.v_scales = static_cast<const uint16_t*>(c.v_scale_data);
  a.scale_block_stride = c.scale_block_stride;
  a.scale_head_stride = c.scale_head_stride;
  a.k_zeros = static_cast<const uint16_t*>(c.k_zero_data);
  a.v_zeros = static_cast<const uint16_t*>(c.v_zero_data);
  a.k_stat_head_stride = c.k_stat_head_stride;
}

// INT8: multiplies the columns of score / probability tiles (accumulator layout of
// mma.m16n8k16: lane (g, t) holds columns 2t, 2t + 1 of each 8-column n-tile, rows g and g + 8)
// by their tokens' fp16 scales; scales[8n + c] belongs to column c of n-tile n.
template <int kTiles>
__device__ __forceinline__ void scale_columns(float (&s)[kTiles][4], const uint16_t* scales,
                                              int t) {
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
    const float2 f = f16x2_to_float2(*reinterpret_cast<const uint32_t*>(scales + 8 * n + 2 * t));
    s[n][0] *= f.x;
    s[n][1] *= f.y;
    s[n][2] *= f.x;
    s[n][3] *= f.y;
  }
}

// The same for scores whose rows are tokens (the decode kernel's token-row tiles: s[0], s[1]
// belong to token g of the tile, s[2], s[3] to token g + 8).
__device__ __forceinline__ void scale_token_rows(float (&s)[4], const uint16_t* scales, int g) {
  const float a = f16x2_to_float2(scales[g]).x;
  const float b = f16x2_to_float2(scales[g + 8]).x;
  s[0] *= a;
  s[1] *= a;
  s[2] *= b;
  s[3] *= b;
}

}  // namespace strata::cuda::detail

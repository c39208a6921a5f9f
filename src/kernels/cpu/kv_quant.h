#pragma once
// Reading and writing rows of a paged KV cache in any pool dtype (docs/kv-quant.md): the one place
// the CPU kernels encode and decode a cached element. Stateless; every function is thread-safe
// for distinct rows.
//
//   F32 / BF16 / F16  stored as is (BF16/F16 rounded to nearest even on write)
//   F8E4M3 / F8E5M2   code = f32_to_fp8(x / scale), saturating; read: fp8_to_f32(code) * scale,
//                     scale = the view's static k_scale / v_scale
//   I8                s = fp16(max_c |x_c| / 127), clamped to the largest finite fp16; code_c =
//                     clamp(round_to_nearest_even(x_c / s), -127, 127) (0 when s == 0 or x_c is
//                     NaN); read: code_c * s. The fp16 scale is what the pool keeps, so the value
//                     read back uses exactly the scale the codes were made with.
//   I4                (KIVI) asymmetric 4-bit codes over a group: K per (KV head, channel) over
//                     the block's tokens, V per (token, KV head) over head_dim. z = the largest
//                     fp16 <= min, s = the smallest fp16 >= (max - z) / 15 (NaNs ignored, both
//                     clamped to finite fp16), code = clamp(round_to_nearest_even((x - z) / s),
//                     0, 15) (0 when s == 0 or x is NaN); read: code * s + z (an fp32 multiply,
//                     then an fp32 add). Written a whole block at a time, when its last token
//                     arrives, from the block's full-precision copy in the newest-blocks
//                     group (attention.h, AppendKvParams); docs/kv-quant.md has the bits.
//
// Decoding is one fp32 multiply per element (code value times scale), plus one fp32 add of the
// zero point for I4, on every path, so the portable and AVX-512 readers return identical bits.

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"

namespace strata::cpu {

// KV cache element types paged_attention and append_kv accept (convert on read / on write).
inline constexpr std::array<DType, 7> kAttentionKvDTypes = {
    DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI8, DType::kI4};

constexpr bool is_attention_kv_dtype(DType t) {
  for (const DType d : kAttentionKvDTypes) {
    if (d == t) return true;
  }
  return false;
}

// Which half of a layer's cache a row belongs to.
enum class KvPart : uint8_t { kK, kV };

// INT8: quantizes n values into codes and returns the fp16 bit pattern of their scale.
uint16_t quantize_int8_row(const float* x, int64_t n, int8_t* codes);
// FP8 (dtype F8E4M3 or F8E5M2): codes[i] = f32_to_fp8(x[i] / scale).
void quantize_fp8_row(const float* x, int64_t n, float scale, DType dtype, uint8_t* codes);

// INT4: the fp16 bit patterns of one group's scale and zero point.
struct Int4Params {
  uint16_t scale = 0;
  uint16_t zero = 0;
};
// The statistics of the n values x[i * stride] (NaNs ignored; all NaN or n == 0: both 0). The
// zero point is never -0.
Int4Params int4_params(const float* x, int64_t n, int64_t stride);
// The code of x in a group whose scale and zero point read back as s and z (the fp32 values of
// Int4Params): clamp(rint((x - z) / s), 0, 15); 0 when s == 0 or x is NaN.
uint8_t int4_code(float x, float s, float z);
// The value a code reads back as: code * s + z, an fp32 multiply then an fp32 add (never fused:
// this file builds with -ffp-contract=off, and the AVX-512 decoder uses separate instructions).
float int4_value(uint8_t code, float s, float z);

// Quantizes one whole block into an I4 cache: block block_id of `cache` (I4) gets the int4 codes
// and statistics of every KV head's K and V made from block source_block of `source` (F32, the
// same heads, head_dim and block size), all block_size tokens of it.
void quantize_int4_block(const PagedKvCacheView& source, int32_t source_block,
                         const PagedKvCacheView& cache, int32_t block_id);

// Writes one head_dim row (token `slot`, KV head kv_head) of K or V into the cache, quantizing
// (and, for I8, writing its scale). cache.dtype must be in kAttentionKvDTypes and not I4, whose
// codes are made a block at a time (quantize_int4_block).
void store_kv_row(const PagedKvCacheView& cache, KvPart part, int64_t slot, int32_t kv_head,
                  const float* src);

// dst[i * head_dim + c] = the fp32 value of channel c of token (token + i) of one block and KV
// head, for i < count (all in the same block). use_avx512: the vectorized decoder (same bits).
void load_kv_rows(const PagedKvCacheView& cache, KvPart part, int32_t block_id, int32_t kv_head,
                  int32_t token, int32_t count, float* dst, bool use_avx512);

}  // namespace strata::cpu

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
//
// Decoding is one fp32 multiply per element (code value times scale) on every path, so the
// portable and AVX-512 readers return identical bits.

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"

namespace strata::cpu {

// KV cache element types paged_attention and append_kv accept (convert on read / on write).
inline constexpr std::array<DType, 6> kAttentionKvDTypes = {
    DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI8};

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

// Writes one head_dim row (token `slot`, KV head kv_head) of K or V into the cache, quantizing
// (and, for I8, writing its scale). cache.dtype must be in kAttentionKvDTypes.
void store_kv_row(const PagedKvCacheView& cache, KvPart part, int64_t slot, int32_t kv_head,
                  const float* src);

// dst[i * head_dim + c] = the fp32 value of channel c of token (token + i) of one block and KV
// head, for i < count (all in the same block). use_avx512: the vectorized decoder (same bits).
void load_kv_rows(const PagedKvCacheView& cache, KvPart part, int32_t block_id, int32_t kv_head,
                  int32_t token, int32_t count, float* dst, bool use_avx512);

}  // namespace strata::cpu

#pragma once
// Device encoders of the quantized KV cache, shared by kv_append() and the append that
// qk_norm_rope() fuses: the CPU encoders' rules bit for bit (kv_quant.h, docs/kv-quant.md).
//   FP8   code = fp8(x / scale): an IEEE division, round to nearest even, saturating
//   INT8  s16 = fp16(min(amax / 127, 65504)); code = clamp(rint(x / s), -127, 127), 0 when s is 0
//         or x is NaN; amax ignores NaN channels (fmaxf)

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/paged_kv.h"

namespace strata::cuda::detail {

// Where a quantizing append writes one layer's K and V rows (codes, INT8's per-row scales, FP8's
// static scales), taken from the layer's view: kv_append() and qk_norm_rope()'s fused append.
struct KvDest {
  uint8_t* k_cache = nullptr;  // codes; a 16-bit cache's rows as bytes
  uint8_t* v_cache = nullptr;
  uint16_t* k_scales = nullptr;  // INT8: fp16 scales; null otherwise
  uint16_t* v_scales = nullptr;
  int64_t block_stride = 0;  // in cache elements
  int64_t head_stride = 0;
  int64_t token_stride = 0;
  int64_t scale_block_stride = 0;  // in fp16 scales
  int64_t scale_head_stride = 0;
  float k_scale = 1.0f;  // FP8 static scales
  float v_scale = 1.0f;
  int32_t block_size = 0;
  DType dtype = DType::kBF16;

  // Element offset of (slot, kv_head)'s row, and of its INT8 scale.
  __device__ int64_t row(int64_t slot, int32_t kv_head) const {
    const int64_t block = slot / block_size;
    return block * block_stride + kv_head * head_stride + (slot - block * block_size) * token_stride;
  }
  __device__ int64_t scale(int64_t slot, int32_t kv_head) const {
    const int64_t block = slot / block_size;
    return block * scale_block_stride + kv_head * scale_head_stride + (slot - block * block_size);
  }
};

inline KvDest kv_dest(const PagedKvCacheView& c) {
  KvDest d;
  d.k_cache = static_cast<uint8_t*>(c.k_data);
  d.v_cache = static_cast<uint8_t*>(c.v_data);
  d.k_scales = static_cast<uint16_t*>(c.k_scale_data);
  d.v_scales = static_cast<uint16_t*>(c.v_scale_data);
  d.block_stride = c.block_stride;
  d.head_stride = c.head_stride;
  d.token_stride = c.token_stride;
  d.scale_block_stride = c.scale_block_stride;
  d.scale_head_stride = c.scale_head_stride;
  d.k_scale = c.k_scale;
  d.v_scale = c.v_scale;
  d.block_size = c.block_size;
  d.dtype = c.dtype;
  return d;
}

template <DType kCache>
__device__ __forceinline__ uint8_t encode_fp8(float x, float scale) {
  constexpr __nv_fp8_interpretation_t kKind = kCache == DType::kF8E4M3 ? __NV_E4M3 : __NV_E5M2;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, kKind));
}

// The fp16 scale of an INT8 row whose largest magnitude is amax.
__device__ __forceinline__ __half int8_row_scale(float amax) {
  return __float2half_rn(fminf(__fdiv_rn(amax, 127.0f), 65504.0f));
}

__device__ __forceinline__ uint8_t encode_int8(float x, float s) {
  float q = 0.0f;
  if (s != 0.0f && !isnan(x)) q = fminf(fmaxf(rintf(__fdiv_rn(x, s)), -127.0f), 127.0f);
  return static_cast<uint8_t>(static_cast<int8_t>(q));
}

}  // namespace strata::cuda::detail

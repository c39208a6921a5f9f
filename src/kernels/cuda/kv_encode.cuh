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

namespace strata::cuda::detail {

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

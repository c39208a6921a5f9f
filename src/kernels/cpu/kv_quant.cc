#include "kernels/cpu/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/kv_quant_avx512.h"

namespace strata::cpu {
namespace {

constexpr float kF16Max = 65504.0f;

void* part_data(const PagedKvCacheView& c, KvPart part) {
  return part == KvPart::kK ? c.k_data : c.v_data;
}
void* part_scales(const PagedKvCacheView& c, KvPart part) {
  return part == KvPart::kK ? c.k_scale_data : c.v_scale_data;
}
float part_static_scale(const PagedKvCacheView& c, KvPart part) {
  return part == KvPart::kK ? c.k_scale : c.v_scale;
}

}  // namespace

uint16_t quantize_int8_row(const float* x, int64_t n, int8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));  // NaN is skipped
  const uint16_t scale_bits = f32_to_f16(std::min(amax / 127.0f, kF16Max));
  const float s = f16_to_f32(scale_bits);
  for (int64_t i = 0; i < n; ++i) {
    float r = s > 0.0f ? std::nearbyint(x[i] / s) : 0.0f;
    if (!(r == r)) r = 0.0f;  // NaN
    r = std::clamp(r, -127.0f, 127.0f);
    codes[i] = static_cast<int8_t>(r);
  }
  return scale_bits;
}

void quantize_fp8_row(const float* x, int64_t n, float scale, DType dtype, uint8_t* codes) {
  const bool e4m3 = dtype == DType::kF8E4M3;
  STRATA_CHECK(e4m3 || dtype == DType::kF8E5M2, "quantize_fp8_row: not an fp8 dtype");
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / scale;
    codes[i] = e4m3 ? f32_to_fp8_e4m3(v) : f32_to_fp8_e5m2(v);
  }
}

void store_kv_row(const PagedKvCacheView& c, KvPart part, int64_t slot, int32_t kv_head,
                  const float* src) {
  const int64_t offset = c.slot_offset(slot, kv_head);
  void* data = part_data(c, part);
  const int64_t n = c.head_dim;
  switch (c.dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(data) + offset, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* dst = static_cast<uint16_t*>(data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      quantize_fp8_row(src, n, part_static_scale(c, part), c.dtype,
                       static_cast<uint8_t*>(data) + offset);
      return;
    case DType::kI8: {
      const auto block = static_cast<int32_t>(slot / c.block_size);
      const auto token = static_cast<int32_t>(slot % c.block_size);
      static_cast<uint16_t*>(part_scales(c, part))[c.scale_offset(block, kv_head, token)] =
          quantize_int8_row(src, n, static_cast<int8_t*>(data) + offset);
      return;
    }
    case DType::kF64:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kU8:
    case DType::kBool:
      break;
  }
  STRATA_CHECK(false, "store_kv_row: cache dtype not validated");
}

void load_kv_rows(const PagedKvCacheView& c, KvPart part, int32_t block_id, int32_t kv_head,
                  int32_t token, int32_t count, float* dst, bool use_avx512) {
  const int64_t d = c.head_dim;
  const void* data = part_data(c, part);
  const int64_t offset = c.offset(block_id, kv_head, token);
  switch (c.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      for (int32_t i = 0; i < count; ++i) {
        detail::load_f32(data, c.dtype, offset + i * c.token_stride, d, dst + i * d);
      }
      return;
    case DType::kF8E4M3:
    case DType::kF8E5M2: {
      const float* table = c.dtype == DType::kF8E4M3 ? fp8_e4m3_table() : fp8_e5m2_table();
      const float scale = part_static_scale(c, part);
      for (int32_t i = 0; i < count; ++i) {
        const uint8_t* codes = static_cast<const uint8_t*>(data) + offset + i * c.token_stride;
        float* out = dst + i * d;
        if (use_avx512) {
          detail::dequantize_fp8_avx512(codes, c.dtype == DType::kF8E4M3, scale, d, out);
          continue;
        }
        for (int64_t k = 0; k < d; ++k) out[k] = table[codes[k]] * scale;
      }
      return;
    }
    case DType::kI8: {
      const uint16_t* scales = static_cast<const uint16_t*>(part_scales(c, part)) +
                               c.scale_offset(block_id, kv_head, token);
      for (int32_t i = 0; i < count; ++i) {
        const int8_t* codes = static_cast<const int8_t*>(data) + offset + i * c.token_stride;
        const float s = f16_to_f32(scales[i]);
        float* out = dst + i * d;
        if (use_avx512) {
          detail::dequantize_int8_avx512(codes, s, d, out);
          continue;
        }
        for (int64_t k = 0; k < d; ++k) out[k] = static_cast<float>(codes[k]) * s;
      }
      return;
    }
    case DType::kF64:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kU8:
    case DType::kBool:
      break;
  }
  STRATA_CHECK(false, "load_kv_rows: cache dtype not validated");
}

}  // namespace strata::cpu

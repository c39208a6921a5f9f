#include "kernels/cpu/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

namespace {

// One fp16 step toward -inf / +inf from a finite fp16 bit pattern (-0 and +0 alike).
uint16_t f16_step_down(uint16_t h) {
  if ((h & 0x7fffu) == 0) return 0x8001u;
  return static_cast<uint16_t>((h & 0x8000u) != 0 ? h + 1 : h - 1);
}
uint16_t f16_step_up(uint16_t h) {
  if ((h & 0x7fffu) == 0) return 0x0001u;
  return static_cast<uint16_t>((h & 0x8000u) != 0 ? h - 1 : h + 1);
}

// The largest fp16 <= v / the smallest fp16 >= v, for v in [-65504, 65504].
uint16_t f16_round_down(float v) {
  const uint16_t h = f32_to_f16(v);
  return f16_to_f32(h) > v ? f16_step_down(h) : h;
}
uint16_t f16_round_up(float v) {
  const uint16_t h = f32_to_f16(v);
  return f16_to_f32(h) < v ? f16_step_up(h) : h;
}

}  // namespace

Int4Params int4_params(const float* x, int64_t n, int64_t stride) {
  float mn = INFINITY;
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i * stride];
    if (v != v) continue;  // NaN
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  if (mn > mx) return {};  // no value: all NaN, or n == 0
  // z <= min (so no value falls below code 0) and 15 s >= max - z (so the max reaches code 15):
  // every value in [z, z + 15 s] reads back within s / 2 of itself.
  uint16_t zero = f16_round_down(std::clamp(mn, -kF16Max, kF16Max));
  if (zero == 0x8000u) zero = 0;  // never -0
  const float z = f16_to_f32(zero);
  float t = (mx - z) / 15.0f;
  if (!(t >= 0.0f)) t = 0.0f;  // mx -inf (every value -inf) gives -inf
  const uint16_t scale = f16_round_up(std::min(t, kF16Max));
  return {scale, zero};
}

uint8_t int4_code(float x, float s, float z) {
  float r = s > 0.0f ? std::nearbyint((x - z) / s) : 0.0f;
  if (!(r == r)) r = 0.0f;  // NaN
  return static_cast<uint8_t>(std::clamp(r, 0.0f, 15.0f));
}

float int4_value(uint8_t code, float s, float z) {
  const float scaled = static_cast<float>(code) * s;
  return scaled + z;
}

void quantize_int4_block(const PagedKvCacheView& source, int32_t source_block,
                         const PagedKvCacheView& cache, int32_t block_id) {
  STRATA_CHECK(cache.dtype == DType::kI4 && source.dtype == DType::kF32,
               "quantize_int4_block: an I4 cache from an F32 source");
  const int32_t bs = cache.block_size;
  const int32_t d = cache.head_dim;
  auto* k_scales = static_cast<uint16_t*>(cache.k_scale_data);
  auto* k_zeros = static_cast<uint16_t*>(cache.k_zero_data);
  auto* v_scales = static_cast<uint16_t*>(cache.v_scale_data);
  auto* v_zeros = static_cast<uint16_t*>(cache.v_zero_data);
  for (int32_t h = 0; h < cache.num_kv_heads; ++h) {
    // K: one group per channel, over the block's tokens.
    const float* k = source.k<float>(source_block, h, 0);
    uint8_t* k_codes = cache.k<uint8_t>(block_id, h, 0);
    const int64_t k_stat = block_id * cache.scale_block_stride + h * cache.k_stat_head_stride;
    for (int32_t c = 0; c < d; ++c) {
      const Int4Params g = int4_params(k + c, bs, source.token_stride);
      k_scales[k_stat + c] = g.scale;
      k_zeros[k_stat + c] = g.zero;
      const float s = f16_to_f32(g.scale);
      const float z = f16_to_f32(g.zero);
      const int shift = 4 * (c & 1);
      for (int32_t t = 0; t < bs; ++t) {
        uint8_t& byte = k_codes[t * cache.token_stride + c / 2];
        const auto code =
            static_cast<uint8_t>(int4_code(k[t * source.token_stride + c], s, z) << shift);
        byte = static_cast<uint8_t>(shift == 0 ? code : (byte & 0x0fu) | code);
      }
    }
    // V: one group per token, over head_dim.
    for (int32_t t = 0; t < bs; ++t) {
      const float* v = source.v<float>(source_block, h, t);
      const Int4Params g = int4_params(v, d, 1);
      v_scales[cache.scale_offset(block_id, h, t)] = g.scale;
      v_zeros[cache.scale_offset(block_id, h, t)] = g.zero;
      const float s = f16_to_f32(g.scale);
      const float z = f16_to_f32(g.zero);
      uint8_t* v_codes = cache.v<uint8_t>(block_id, h, t);
      for (int32_t c = 0; c < d; c += 2) {
        v_codes[c / 2] =
            static_cast<uint8_t>(int4_code(v[c], s, z) | int4_code(v[c + 1], s, z) << 4);
      }
    }
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
    case DType::kI4:  // a block at a time: quantize_int4_block
    case DType::kF64:
    case DType::kI64:
    case DType::kI32:
    case DType::kI16:
    case DType::kU8:
    case DType::kBool:
      break;
  }
  STRATA_CHECK(false, "store_kv_row: cache dtype not validated (or I4)");
}

namespace {

// load_kv_rows for I4: K's scales and zero points per channel (decoded once per call), V's per
// token.
void load_int4_rows(const PagedKvCacheView& c, KvPart part, int32_t block_id, int32_t kv_head,
                    int32_t token, int32_t count, float* dst, bool use_avx512) {
  const int32_t d = c.head_dim;
  const uint8_t* codes =
      static_cast<const uint8_t*>(part_data(c, part)) + c.offset(block_id, kv_head, token);
  const auto* scales = static_cast<const uint16_t*>(part_scales(c, part));
  const auto* zeros =
      static_cast<const uint16_t*>(part == KvPart::kK ? c.k_zero_data : c.v_zero_data);
  if (part == KvPart::kK) {
    const int64_t at = block_id * c.scale_block_stride + kv_head * c.k_stat_head_stride;
    if (use_avx512) {  // widens the fp16 statistics in registers
      for (int32_t i = 0; i < count; ++i) {
        detail::dequantize_int4_avx512(codes + i * c.token_stride, scales + at, zeros + at, d,
                                       dst + static_cast<int64_t>(i) * d);
      }
      return;
    }
    // Per channel: d fp32 scales then d zero points, on the stack for the usual head dims.
    constexpr int32_t kStackDim = 256;
    float stack[2 * kStackDim];
    std::vector<float> heap;
    float* s = stack;
    if (d > kStackDim) {
      heap.resize(2 * static_cast<size_t>(d));
      s = heap.data();
    }
    float* z = s + d;
    for (int32_t i = 0; i < d; ++i) {
      s[i] = f16_to_f32(scales[at + i]);
      z[i] = f16_to_f32(zeros[at + i]);
    }
    for (int32_t i = 0; i < count; ++i) {
      const uint8_t* row = codes + i * c.token_stride;
      float* out = dst + static_cast<int64_t>(i) * d;
      for (int32_t j = 0; j < d; ++j) {
        const auto code = static_cast<uint8_t>((row[j / 2] >> (4 * (j & 1))) & 0x0fu);
        out[j] = int4_value(code, s[j], z[j]);
      }
    }
    return;
  }
  for (int32_t i = 0; i < count; ++i) {
    const int64_t at = c.scale_offset(block_id, kv_head, token + i);
    const float s = f16_to_f32(scales[at]);
    const float z = f16_to_f32(zeros[at]);
    const uint8_t* row = codes + i * c.token_stride;
    float* out = dst + static_cast<int64_t>(i) * d;
    if (use_avx512) {
      detail::dequantize_int4_row_avx512(row, s, z, d, out);
      continue;
    }
    for (int32_t j = 0; j < d; ++j) {
      const auto code = static_cast<uint8_t>((row[j / 2] >> (4 * (j & 1))) & 0x0fu);
      out[j] = int4_value(code, s, z);
    }
  }
}

}  // namespace

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
    case DType::kI4:
      load_int4_rows(c, part, block_id, kv_head, token, count, dst, use_avx512);
      return;
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

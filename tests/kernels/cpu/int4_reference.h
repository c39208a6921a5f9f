#pragma once
// The INT4 (KIVI) encoding of docs/kv-quant.md written out independently of kv_quant.cc, for the
// tests: the directed fp16 roundings come from a sorted table of every finite fp16 value instead
// of the kernels' bit stepping.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/paged_kv.h"

namespace strata::cpu::test_util {

// Every finite fp16 value in increasing order with its bits (+0 only, never -0).
inline const std::vector<std::pair<float, uint16_t>>& finite_fp16() {
  static const std::vector<std::pair<float, uint16_t>> table = [] {
    std::vector<std::pair<float, uint16_t>> t;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      const float f = f16_to_f32(static_cast<uint16_t>(h));
      if (std::isfinite(f) && h != 0x8000u) t.emplace_back(f, static_cast<uint16_t>(h));
    }
    std::sort(t.begin(), t.end());
    return t;
  }();
  return table;
}

// The largest fp16 <= v and the smallest fp16 >= v, v in [-65504, 65504].
inline uint16_t fp16_floor(float v) {
  const auto& t = finite_fp16();
  const auto it = std::upper_bound(t.begin(), t.end(), std::make_pair(v, uint16_t{0xFFFF}));
  return std::prev(it)->second;
}
inline uint16_t fp16_ceil(float v) {
  const auto& t = finite_fp16();
  return std::lower_bound(t.begin(), t.end(), std::make_pair(v, uint16_t{0}))->second;
}

struct Int4Group {
  uint16_t scale = 0;
  uint16_t zero = 0;
  std::vector<uint8_t> codes;
};

// The documented encoding of the n values x[i * stride].
inline Int4Group int4_reference(const float* x, int64_t n, int64_t stride) {
  float mn = 0.0f;
  float mx = 0.0f;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i * stride];
    if (std::isnan(v)) continue;
    mn = any ? std::min(mn, v) : v;
    mx = any ? std::max(mx, v) : v;
    any = true;
  }
  Int4Group g;
  if (any) {
    g.zero = fp16_floor(std::clamp(mn, -65504.0f, 65504.0f));
    const float z = f16_to_f32(g.zero);
    const float t = (mx - z) / 15.0f;
    g.scale = fp16_ceil(std::isnan(t) || t < 0.0f ? 0.0f : std::min(t, 65504.0f));
  }
  const float s = f16_to_f32(g.scale);
  const float z = f16_to_f32(g.zero);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i * stride];
    float r = 0.0f;
    if (s > 0.0f && !std::isnan(v)) r = std::nearbyint((v - z) / s);
    if (std::isnan(r)) r = 0.0f;
    g.codes.push_back(static_cast<uint8_t>(std::max(0.0f, std::min(15.0f, r))));
  }
  return g;
}

// What a code reads back as: an fp32 multiply, then an fp32 add (volatile: never fused).
inline float int4_read(uint8_t code, uint16_t scale, uint16_t zero) {
  volatile float scaled = static_cast<float>(code) * f16_to_f32(scale);
  return scaled + f16_to_f32(zero);
}

// Writes the documented int4 block: block block_id of the I4 view `cache` from the F32 rows
// rows(head, token) -> const float* [head_dim].
template <typename KRows, typename VRows>
void write_int4_block_reference(const PagedKvCacheView& cache, int32_t block_id, KRows k_rows,
                                VRows v_rows) {
  const int32_t bs = cache.block_size;
  const int32_t d = cache.head_dim;
  auto* ks = static_cast<uint16_t*>(cache.k_scale_data);
  auto* kz = static_cast<uint16_t*>(cache.k_zero_data);
  auto* vs = static_cast<uint16_t*>(cache.v_scale_data);
  auto* vz = static_cast<uint16_t*>(cache.v_zero_data);
  for (int32_t h = 0; h < cache.num_kv_heads; ++h) {
    for (int32_t c = 0; c < d; ++c) {
      std::vector<float> group;
      for (int32_t t = 0; t < bs; ++t) group.push_back(k_rows(h, t)[c]);
      const Int4Group g = int4_reference(group.data(), bs, 1);
      const int64_t at = block_id * cache.scale_block_stride + h * cache.k_stat_head_stride + c;
      ks[at] = g.scale;
      kz[at] = g.zero;
      for (int32_t t = 0; t < bs; ++t) {
        uint8_t& byte = cache.k<uint8_t>(block_id, h, t)[c / 2];
        const uint8_t code = g.codes[static_cast<size_t>(t)];
        byte = c % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | code)
                          : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
      }
    }
    for (int32_t t = 0; t < bs; ++t) {
      const Int4Group g = int4_reference(v_rows(h, t), d, 1);
      vs[cache.scale_offset(block_id, h, t)] = g.scale;
      vz[cache.scale_offset(block_id, h, t)] = g.zero;
      for (int32_t c = 0; c < d; ++c) {
        uint8_t& byte = cache.v<uint8_t>(block_id, h, t)[c / 2];
        const uint8_t code = g.codes[static_cast<size_t>(c)];
        byte = c % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | code)
                          : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
      }
    }
  }
}

}  // namespace strata::cpu::test_util

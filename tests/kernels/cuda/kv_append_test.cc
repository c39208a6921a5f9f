// KV append by slot mapping: every KV dtype, head dim and block size; odd token counts; padding
// slots (-1) skipped; sources with a row stride larger than their rows (fused qkv buffers). The
// whole pool is compared, so a write to any wrong byte fails.

#include "kernels/cuda/kv_append.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/dispatch.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

class KvAppendTest : public CudaTest {};

void run_append(DType dtype, int32_t head_dim, int32_t block_size, int32_t num_tokens,
                uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " hd" + std::to_string(head_dim) + " bs" +
               std::to_string(block_size) + " tokens " + std::to_string(num_tokens));
  std::mt19937_64 rng(seed);
  constexpr int32_t kKvHeads = 3;
  const kv::KvLayout layout(kv::KvSpec{2, kKvHeads, head_dim, dtype}, block_size);
  const int32_t num_blocks = (num_tokens + block_size - 1) / block_size + 3;
  const int64_t pool_elems = layout.pool_bytes(num_blocks) / 2;
  std::vector<uint16_t> pool =
      random_halves(static_cast<size_t>(pool_elems), dtype, -1.0f, 1.0f, rng);

  const int64_t row = static_cast<int64_t>(kKvHeads) * head_dim;
  const int64_t k_stride = row + 8;
  const int64_t v_stride = 3 * row;  // as if V sat in a fused [q | k | v] row
  const std::vector<uint16_t> k =
      random_halves(static_cast<size_t>(num_tokens * k_stride), dtype, -2.0f, 2.0f, rng);
  const std::vector<uint16_t> v =
      random_halves(static_cast<size_t>(num_tokens * v_stride), dtype, -2.0f, 2.0f, rng);
  // Distinct slots of blocks 1.. (block 0 is the null block), every fifth token padding.
  std::vector<int64_t> slots(static_cast<size_t>(num_blocks - 1) * block_size);
  std::iota(slots.begin(), slots.end(), block_size);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(num_tokens));
  for (int32_t t = 0; t < num_tokens; t += 5) slots[t] = -1;

  DeviceBuffer d_pool = upload(pool);
  DeviceBuffer d_k = upload(k);
  DeviceBuffer d_v = upload(v);
  DeviceBuffer d_slots = upload(slots);
  KvAppendParams p;
  p.cache = layout.layer_view(d_pool.data(), 1);
  p.k = d_k.data();
  p.v = d_v.data();
  p.src_dtype = dtype;
  p.k_token_stride = k_stride;
  p.v_token_stride = v_stride;
  p.slot_mapping = d_slots.as<int64_t>();
  p.num_tokens = num_tokens;
  STRATA_ASSERT_OK(kv_append(p, nullptr));
  sync_device();

  const PagedKvCacheView host = layout.layer_view(pool.data(), 1);
  uint16_t* k_base = host.k<uint16_t>(0, 0, 0);
  uint16_t* v_base = host.v<uint16_t>(0, 0, 0);
  for (int32_t t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    for (int32_t h = 0; h < kKvHeads; ++h) {
      const int64_t off = host.slot_offset(slots[t], h);
      std::copy_n(&k[t * k_stride + h * head_dim], head_dim, k_base + off);
      std::copy_n(&v[t * v_stride + h * head_dim], head_dim, v_base + off);
    }
  }
  const auto got = download<uint16_t>(d_pool, pool.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < pool.size(); ++i) mismatches += got[i] != pool[i];
  EXPECT_EQ(mismatches, 0);
}

TEST_F(KvAppendTest, WritesEverySlotAndNothingElse) {
  uint64_t seed = 1;
  for (DType dtype : kKvDTypes) {
    for (int32_t hd : kAttentionHeadDims) {
      for (int32_t bs : kKvBlockSizes) {
        for (int32_t tokens : {1, 17, 97}) run_append(dtype, hd, bs, tokens, seed++);
      }
    }
  }
}

TEST_F(KvAppendTest, Writes2049TokensOfAPrefill) {
  run_append(DType::kBF16, 128, 16, 2049, 99);
  run_append(DType::kF16, 64, 128, 2049, 98);
}

// The host encoders of docs/kv-quant.md, written from the formulas.
uint8_t encode_fp8(float x, float scale, DType dtype) {
  const float y = x / scale;
  return dtype == DType::kF8E4M3 ? f32_to_fp8_e4m3(y) : f32_to_fp8_e5m2(y);
}
uint16_t encode_int8_row(const float* x, int32_t n, int8_t* codes) {
  float amax = 0.0f;
  for (int32_t c = 0; c < n; ++c) amax = std::fmax(amax, std::fabs(x[c]));
  const uint16_t s16 = f32_to_f16(std::fmin(amax / 127.0f, 65504.0f));
  const float s = f16_to_f32(s16);
  for (int32_t c = 0; c < n; ++c) {
    const float q = s == 0.0f || std::isnan(x[c])
                        ? 0.0f
                        : std::fmin(std::fmax(std::nearbyint(x[c] / s), -127.0f), 127.0f);
    codes[c] = static_cast<int8_t>(q);
  }
  return s16;
}

// Quantizing append from bf16 / f16 rows: the whole pool (codes and INT8 scale areas, both
// layers) must equal the host encoding byte for byte.
void run_quantized_append(DType cache_dtype, DType src_dtype, int32_t head_dim, int32_t block_size,
                          int32_t num_tokens, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(cache_dtype)) + " from " +
               std::string(dtype_name(src_dtype)) + " hd" + std::to_string(head_dim) + " bs" +
               std::to_string(block_size) + " tokens " + std::to_string(num_tokens));
  std::mt19937_64 rng(seed);
  constexpr int32_t kKvHeads = 3;
  kv::KvStaticScales scales;
  if (cache_dtype != DType::kI8) scales = {{0.011f, 0.013f}, {0.017f, 0.0071f}};
  const kv::KvLayout layout(kv::KvSpec{2, kKvHeads, head_dim, cache_dtype}, block_size, scales);
  const int32_t num_blocks = (num_tokens + block_size - 1) / block_size + 3;
  std::vector<uint8_t> pool(static_cast<size_t>(layout.pool_bytes(num_blocks)));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : pool) b = static_cast<uint8_t>(byte(rng));

  const int64_t row = static_cast<int64_t>(kKvHeads) * head_dim;
  const int64_t k_stride = row + 8;
  const int64_t v_stride = 3 * row;
  // Wide ranges so that FP8 saturates and INT8 rows differ in scale; one row of zeros.
  std::vector<uint16_t> k =
      random_halves(static_cast<size_t>(num_tokens * k_stride), src_dtype, -6.0f, 6.0f, rng);
  const std::vector<uint16_t> v =
      random_halves(static_cast<size_t>(num_tokens * v_stride), src_dtype, -0.5f, 0.5f, rng);
  std::fill_n(k.begin(), head_dim, uint16_t{0});
  std::vector<int64_t> slots(static_cast<size_t>(num_blocks - 1) * block_size);
  std::iota(slots.begin(), slots.end(), block_size);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(num_tokens));
  for (int32_t t = 1; t < num_tokens; t += 5) slots[t] = -1;

  DeviceBuffer d_pool = upload(pool);
  DeviceBuffer d_k = upload(k);
  DeviceBuffer d_v = upload(v);
  DeviceBuffer d_slots = upload(slots);
  KvAppendParams p;
  p.cache = layout.layer_view(d_pool.data(), 1);
  p.k = d_k.data();
  p.v = d_v.data();
  p.src_dtype = src_dtype;
  p.k_token_stride = k_stride;
  p.v_token_stride = v_stride;
  p.slot_mapping = d_slots.as<int64_t>();
  p.num_tokens = num_tokens;
  STRATA_ASSERT_OK(kv_append(p, nullptr));
  sync_device();

  const PagedKvCacheView host = layout.layer_view(pool.data(), 1);
  auto to_f32 = [&](uint16_t h) {
    return src_dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  };
  std::vector<float> x(static_cast<size_t>(head_dim));
  for (int32_t t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    for (int32_t h = 0; h < kKvHeads; ++h) {
      const int64_t off = host.slot_offset(slots[t], h);
      for (int part = 0; part < 2; ++part) {
        const uint16_t* src = part == 0 ? &k[t * k_stride + h * head_dim] : &v[t * v_stride + h * head_dim];
        for (int32_t c = 0; c < head_dim; ++c) x[c] = to_f32(src[c]);
        auto* codes = static_cast<uint8_t*>(part == 0 ? host.k_data : host.v_data) + off;
        if (cache_dtype == DType::kI8) {
          const uint16_t s16 = encode_int8_row(x.data(), head_dim, reinterpret_cast<int8_t*>(codes));
          auto* scale_area = static_cast<uint16_t*>(part == 0 ? host.k_scale_data : host.v_scale_data);
          scale_area[host.scale_offset(static_cast<int32_t>(slots[t] / block_size), h,
                                       static_cast<int32_t>(slots[t] % block_size))] = s16;
        } else {
          const float scale = part == 0 ? host.k_scale : host.v_scale;
          for (int32_t c = 0; c < head_dim; ++c) codes[c] = encode_fp8(x[c], scale, cache_dtype);
        }
      }
    }
  }
  const auto got = download<uint8_t>(d_pool, pool.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < pool.size(); ++i) mismatches += got[i] != pool[i];
  EXPECT_EQ(mismatches, 0);
}

TEST_F(KvAppendTest, QuantizesEveryRowLikeTheHostEncoders) {
  uint64_t seed = 100;
  for (DType cache : kQuantizedKvDTypes) {
    for (DType src : {DType::kBF16, DType::kF16}) {
      for (int32_t hd : kAttentionHeadDims) {
        for (int32_t bs : {8, 16, 128}) {
          for (int32_t tokens : {1, 17, 97}) run_quantized_append(cache, src, hd, bs, tokens, seed++);
        }
      }
    }
  }
}

TEST(KvAppendDispatchTest, UnsupportedDTypeReturnsStatus) {
  KvAppendParams p;
  p.cache.dtype = DType::kF32;
  p.cache.num_kv_heads = 1;
  p.cache.head_dim = 128;
  p.cache.block_size = 16;
  p.num_tokens = 1;
  EXPECT_EQ(kv_append(p, nullptr).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace strata::cuda::testing

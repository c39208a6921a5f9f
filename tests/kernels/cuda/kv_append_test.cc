// KV append by slot mapping: every KV dtype, head dim and block size; odd token counts; padding
// slots (-1) skipped; sources with a row stride larger than their rows (fused qkv buffers). The
// whole pool is compared, so a write to any wrong byte fails.

#include "kernels/cuda/kv_append.h"

#include <gtest/gtest.h>

#include <algorithm>
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

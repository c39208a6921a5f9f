// plan_kv_groups and memory_pool_blocks: the one rule that turns KV memory into pools, for the
// engine and for `strata plan`.
#include "kv/kv_pool_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::kv {
namespace {

KvSpec spec_of(int32_t layers, DType dtype, std::vector<DType> layer_dtypes = {}) {
  return KvSpec{.num_layers = layers,
                .num_kv_heads = 2,
                .head_dim = 64,
                .dtype = dtype,
                .layer_dtypes = std::move(layer_dtypes)};
}

KvGroupsRequest request(KvSpec spec, std::vector<int32_t> windows) {
  return KvGroupsRequest{
      .spec = std::move(spec),
      .layer_windows = std::move(windows),
      .limits = {.block_size = 16, .max_num_seqs = 8, .max_num_batched_tokens = 512}};
}

TEST(KvPoolPlanTest, FullAttentionIsOneGroupSizedByMemory) {
  const KvGroupsPlan plan = plan_kv_groups(request(spec_of(4, DType::kF32), {}));
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].spec.kind, KvGroupKind::kFullAttention);
  EXPECT_EQ(plan.groups[0].layers, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(plan.groups[0].num_blocks, 0);
  EXPECT_TRUE(plan.slots.empty());
  EXPECT_EQ(plan.window, 0);
  EXPECT_EQ(plan.reserved_bytes, 0);
  // 4 layers x K,V x 2 heads x 16 tokens x 64 dims x 4 bytes = 64 KiB a block.
  const int64_t block = 4 * 2 * 2 * 16 * 64 * 4;
  EXPECT_EQ(plan.groups[0].spec.block_bytes(16), block);
  const Result<int32_t> blocks = memory_pool_blocks(plan, 10 * block + block / 2, 16);
  ASSERT_TRUE(blocks.ok()) << blocks.status().message();
  EXPECT_EQ(*blocks, 10);
}

TEST(KvPoolPlanTest, EveryLayerWindowedIsOneWindowedGroup) {
  const KvGroupsPlan plan = plan_kv_groups(request(spec_of(3, DType::kF32), {64, 64, 64}));
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].spec.kind, KvGroupKind::kSlidingWindow);
  EXPECT_EQ(plan.groups[0].spec.window, 64);
  EXPECT_EQ(plan.window, 64);
}

TEST(KvPoolPlanTest, HybridModelSplitsItsLayersAndReservesTheWindowedPool) {
  // Layers 0 and 2 full attention, 1 and 3 a 100-token window.
  const KvGroupsPlan plan = plan_kv_groups(request(spec_of(4, DType::kF32), {0, 100, -1, 100}));
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].spec.kind, KvGroupKind::kFullAttention);
  EXPECT_EQ(plan.groups[0].layers, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(plan.groups[0].spec.kv.num_layers, 2);
  EXPECT_EQ(plan.groups[1].spec.kind, KvGroupKind::kSlidingWindow);
  EXPECT_EQ(plan.groups[1].spec.window, 100);
  EXPECT_EQ(plan.groups[1].layers, (std::vector<int32_t>{1, 3}));
  // Held per sequence: ceil(100 / 16) + 2 = 9; 8 x (9 + 1) + ceil(512 / 16) + 1 = 113 blocks.
  EXPECT_EQ(plan.groups[1].num_blocks, 113);
  ASSERT_EQ(plan.slots.size(), 4u);
  EXPECT_EQ(plan.slots[3].group, 1);
  EXPECT_EQ(plan.slots[3].index, 1);
  EXPECT_EQ(plan.slots[2].group, 0);
  EXPECT_EQ(plan.slots[2].index, 1);
  const int64_t half_block = 2 * 2 * 2 * 16 * 64 * 4;
  EXPECT_EQ(plan.reserved_bytes, 113 * half_block);
  EXPECT_EQ(plan.reserved_what, kWindowedLayersPool);
  const Result<int32_t> blocks = memory_pool_blocks(plan, 113 * half_block + 7 * half_block, 16);
  ASSERT_TRUE(blocks.ok()) << blocks.status().message();
  EXPECT_EQ(*blocks, 7);
}

TEST(KvPoolPlanTest, HybridGroupsOffKeepsEveryLayerInGroupZero) {
  KvGroupsRequest r = request(spec_of(4, DType::kF32), {0, 100, 0, 100});
  r.hybrid_groups = false;
  const KvGroupsPlan plan = plan_kv_groups(r);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].spec.kind, KvGroupKind::kFullAttention);
  EXPECT_EQ(plan.groups[0].layers.size(), 4u);
  EXPECT_TRUE(plan.slots.empty());
}

TEST(KvPoolPlanTest, Int4CacheReservesItsNewestBlocksAtFullPrecision) {
  for (const DType full : {DType::kF32, DType::kBF16}) {
    KvGroupsRequest r = request(spec_of(2, DType::kI4), {});
    r.int4_residual_blocks = 3;
    r.full_precision = full;
    const KvGroupsPlan plan = plan_kv_groups(r);
    ASSERT_EQ(plan.groups.size(), 2u);
    EXPECT_EQ(plan.groups[1].spec.kind, KvGroupKind::kNewestBlocks);
    EXPECT_EQ(plan.groups[1].spec.newest_blocks, 3);
    EXPECT_EQ(plan.groups[1].spec.kv.dtype, full);
    // 8 x (3 + 1) + 32 + 1 = 65 blocks of 2 layers x K,V x 2 heads x 16 x 64 at full precision.
    EXPECT_EQ(plan.groups[1].num_blocks, 65);
    EXPECT_EQ(plan.reserved_bytes, int64_t{65} * 2 * 2 * 2 * 16 * 64 * dtype_size(full));
    EXPECT_EQ(plan.reserved_what, kInt4ResidualPool);
  }
}

TEST(KvPoolPlanTest, HybridInt4KeepsEveryLayerInGroupZero) {
  const KvGroupsPlan plan = plan_kv_groups(request(spec_of(4, DType::kI4), {0, 100, 0, 100}));
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].layers.size(), 4u);
  EXPECT_EQ(plan.groups[1].spec.kind, KvGroupKind::kNewestBlocks);
  EXPECT_TRUE(plan.slots.empty());
}

TEST(KvPoolPlanTest, MemoryThatTheReservedPoolsFillIsRefusedNamingThem) {
  const Result<int32_t> r = memory_pool_blocks(1000, 1000, kInt4ResidualPool, 100, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("int4 residual pool"), std::string::npos);
  EXPECT_NE(r.status().message().find("--kv-int4-residual"), std::string::npos);
  const Result<int32_t> w = memory_pool_blocks(1000, 2000, kWindowedLayersPool, 100, 16);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("windowed layers"), std::string::npos);
  EXPECT_EQ(w.status().message().find("--kv-int4-residual"), std::string::npos);
}

TEST(KvPoolPlanTest, FewerThanTwoBlocksIsRefused) {
  EXPECT_FALSE(memory_pool_blocks(199, 0, "", 100, 16).ok());
  EXPECT_FALSE(memory_pool_blocks(1199, 1000, kWindowedLayersPool, 100, 16).ok());
  const Result<int32_t> two = memory_pool_blocks(200, 0, "", 100, 16);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, 2);
}

TEST(KvPoolPlanTest, BlocksAreCappedAtTwoToTheThirty) {
  const Result<int32_t> r = memory_pool_blocks(int64_t{1} << 45, 0, "", 16, 16);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, int32_t{1} << 30);
}

}  // namespace
}  // namespace strata::kv

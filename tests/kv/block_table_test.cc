#include "kv/block_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::PoolSnapshot;
using test_util::set_free_queue_order;
using test_util::values;
using V = std::vector<int32_t>;

class BlockTableSizeTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(BlockTableSizeTest, SlotIsBlockIdTimesBlockSizePlusOffset) {
  const int32_t bs = GetParam();
  BlockPool pool(12);
  set_free_queue_order(pool, {9, 3, 11, 1, 6});  // non-consecutive ids, so slots are informative
  BlockTable table(bs);
  EXPECT_EQ(table.block_size(), bs);

  // Grow in uneven steps: 1 token, to the end of the block, one more, then three and a half blocks.
  const std::vector<int32_t> steps = {1, bs - 1, 1, 3 * bs + bs / 2};
  const std::vector<V> expected_blocks = {{9}, {9}, {9, 3}, {9, 3, 11, 1, 6}};
  int32_t tokens = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(table.append_slots(pool, steps[i]));
    pool.check_invariants();
    tokens += steps[i];
    EXPECT_EQ(table.num_tokens(), tokens);
    EXPECT_EQ(values(table.blocks()), expected_blocks[i]) << "after step " << i;
  }
  const V order = {9, 3, 11, 1, 6};
  for (int32_t pos = 0; pos < tokens; ++pos) {
    const int64_t expected =
        static_cast<int64_t>(order[static_cast<size_t>(pos / bs)]) * bs + pos % bs;
    ASSERT_EQ(table.slot(pos), expected) << "block size " << bs << " pos " << pos;
  }
  // Spot checks written out by hand.
  EXPECT_EQ(table.slot(0), 9 * bs);
  EXPECT_EQ(table.slot(bs - 1), 9 * bs + bs - 1);
  EXPECT_EQ(table.slot(bs), 3 * bs);
  EXPECT_EQ(table.slot(4 * bs), 6 * bs);
  EXPECT_EQ(table.slot(tokens - 1), 6 * bs + bs / 2);
}

TEST_P(BlockTableSizeTest, NumBlocksNeededCountsOnlyNewBlocks) {
  const int32_t bs = GetParam();
  BlockPool pool(8);
  BlockTable table(bs);
  EXPECT_EQ(table.num_blocks_needed(0), 0);
  EXPECT_EQ(table.num_blocks_needed(1), 1);
  EXPECT_EQ(table.num_blocks_needed(bs), 1);
  EXPECT_EQ(table.num_blocks_needed(bs + 1), 2);
  EXPECT_EQ(table.num_blocks_needed(3 * bs), 3);

  ASSERT_TRUE(table.append_slots(pool, bs - 1));  // one free slot left in the block
  EXPECT_EQ(table.num_blocks_needed(0), 0);
  EXPECT_EQ(table.num_blocks_needed(1), 0);
  EXPECT_EQ(table.num_blocks_needed(2), 1);
  EXPECT_EQ(table.num_blocks_needed(bs + 1), 1);
  EXPECT_EQ(table.num_blocks_needed(bs + 2), 2);

  ASSERT_TRUE(table.append_slots(pool, 1));  // exactly on the boundary
  EXPECT_EQ(table.num_blocks_needed(0), 0);
  EXPECT_EQ(table.num_blocks_needed(1), 1);
  EXPECT_EQ(table.num_blocks_needed(bs), 1);
  EXPECT_EQ(table.num_blocks_needed(bs + 1), 2);
}

TEST_P(BlockTableSizeTest, NumBlocksNeededHasNoSideEffects) {
  const int32_t bs = GetParam();
  BlockPool pool(8);
  BlockTable table(bs);
  ASSERT_TRUE(table.append_slots(pool, bs + 3));
  const PoolSnapshot before(pool);
  for (int32_t n = 0; n < 5 * bs; n += 7) (void)table.num_blocks_needed(n);
  EXPECT_EQ(PoolSnapshot(pool), before);
  EXPECT_EQ(table.num_tokens(), bs + 3);
  EXPECT_EQ(values(table.blocks()), (V{1, 2}));
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, BlockTableSizeTest, ::testing::Values(8, 16, 32, 64, 128),
                         [](const ::testing::TestParamInfo<int32_t>& info) {
                           return "BlockSize" + std::to_string(info.param);
                         });

TEST(BlockTableTest, NewTableIsEmpty) {
  const BlockTable table(16);
  EXPECT_EQ(table.num_tokens(), 0);
  EXPECT_TRUE(table.blocks().empty());
}

TEST(BlockTableTest, AppendSlotsIsTransactionalOnFailure) {
  BlockPool pool(5);  // 4 allocatable
  set_free_queue_order(pool, {3, 1, 4, 2});
  BlockTable table(16);
  ASSERT_TRUE(table.append_slots(pool, 20));  // blocks 3, 1
  pool.check_invariants();
  const PoolSnapshot before(pool);
  ASSERT_EQ(before.free_queue, (V{4, 2}));

  // 20 + 45 = 65 tokens need 5 blocks: 3 more, only 2 free.
  EXPECT_FALSE(table.append_slots(pool, 45));
  pool.check_invariants();
  EXPECT_EQ(PoolSnapshot(pool), before);
  EXPECT_EQ(table.num_tokens(), 20);
  EXPECT_EQ(values(table.blocks()), (V{3, 1}));
  EXPECT_EQ(table.slot(19), 1 * 16 + 3);

  // What does fit still goes through, with the exact next blocks.
  EXPECT_TRUE(table.append_slots(pool, 44));  // 64 tokens, 4 blocks
  pool.check_invariants();
  EXPECT_EQ(values(table.blocks()), (V{3, 1, 4, 2}));
  EXPECT_EQ(table.num_tokens(), 64);
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(BlockTableTest, AppendThatFitsInTheLastBlockNeedsNoFreeBlock) {
  BlockPool pool(2);  // a single allocatable block
  BlockTable table(8);
  ASSERT_TRUE(table.append_slots(pool, 3));
  ASSERT_EQ(pool.num_free_blocks(), 0);
  EXPECT_TRUE(table.append_slots(pool, 5));  // fills block 1 exactly
  EXPECT_TRUE(table.append_slots(pool, 0));
  EXPECT_FALSE(table.append_slots(pool, 1));  // the 9th token needs a block
  pool.check_invariants();
  EXPECT_EQ(table.num_tokens(), 8);
  EXPECT_EQ(values(table.blocks()), (V{1}));
}

TEST(BlockTableTest, AppendZeroTokensAlwaysSucceedsAndAllocatesNothing) {
  BlockPool pool(1);  // nothing allocatable
  BlockTable table(16);
  EXPECT_TRUE(table.append_slots(pool, 0));
  EXPECT_EQ(table.num_tokens(), 0);
  EXPECT_TRUE(table.blocks().empty());
  pool.check_invariants();
}

TEST(BlockTableTest, ReleaseReturnsEveryBlockInTableOrderAndEmptiesTheTable) {
  BlockPool pool(8);
  set_free_queue_order(pool, {5, 2, 7});
  BlockTable table(16);
  ASSERT_TRUE(table.append_slots(pool, 40));  // blocks 5, 2, 7
  ASSERT_EQ(values(pool.free_queue()), (V{1, 3, 4, 6}));
  table.release(pool);
  pool.check_invariants();
  EXPECT_EQ(table.num_tokens(), 0);
  EXPECT_TRUE(table.blocks().empty());
  EXPECT_EQ(values(pool.free_queue()), (V{1, 3, 4, 6, 5, 2, 7}));
  EXPECT_EQ(pool.num_used_blocks(), 0);

  // The table is reusable and takes blocks from the front again.
  ASSERT_TRUE(table.append_slots(pool, 17));
  EXPECT_EQ(values(table.blocks()), (V{1, 3}));
  EXPECT_EQ(table.slot(16), 3 * 16);
}

TEST(BlockTableTest, ReleaseOfAnEmptyTableChangesNothing) {
  BlockPool pool(4);
  BlockTable table(32);
  const PoolSnapshot before(pool);
  table.release(pool);
  pool.check_invariants();
  EXPECT_EQ(PoolSnapshot(pool), before);
}

TEST(BlockTableTest, ReleaseOfAForkedTableKeepsSharedBlocksAlive) {
  BlockPool pool(6);
  BlockTable parent(8);
  ASSERT_TRUE(parent.append_slots(pool, 12));  // blocks 1, 2
  BlockTable child = parent;
  pool.add_ref(child.blocks());
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(BlockId{1}), 2);

  parent.release(pool);
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(BlockId{1}), 1);
  EXPECT_EQ(pool.ref_count(BlockId{2}), 1);
  EXPECT_EQ(values(pool.free_queue()), (V{3, 4, 5}));
  EXPECT_EQ(child.slot(11), 2 * 8 + 3);

  child.release(pool);
  pool.check_invariants();
  EXPECT_EQ(values(pool.free_queue()), (V{3, 4, 5, 1, 2}));
}

TEST(BlockTableDeathTest, SlotOfAPositionWithoutASlotAborts) {
  BlockPool pool(4);
  BlockTable table(16);
  ASSERT_TRUE(table.append_slots(pool, 5));
  EXPECT_DEATH((void)table.slot(5), "position has no slot");
  EXPECT_DEATH((void)table.slot(-1), "position has no slot");
}

TEST(BlockTableDeathTest, NonPositiveBlockSizeAborts) {
  EXPECT_DEATH(BlockTable table(0), "block_size must be positive");
  EXPECT_DEATH(BlockTable table(-16), "block_size must be positive");
}

TEST(BlockTableDeathTest, NegativeTokenCountAborts) {
  BlockPool pool(4);
  BlockTable table(16);
  EXPECT_DEATH((void)table.num_blocks_needed(-1), "negative token count");
  EXPECT_DEATH((void)table.append_slots(pool, -1), "negative token count");
}

}  // namespace
}  // namespace strata::kv

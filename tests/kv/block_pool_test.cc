#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::ids;
using test_util::PoolSnapshot;
using test_util::values;
using V = std::vector<int32_t>;

// Allocates n blocks, asserting success and the invariants.
std::vector<BlockId> take(BlockPool& pool, int32_t n) {
  std::optional<std::vector<BlockId>> blocks = pool.allocate(n);
  EXPECT_TRUE(blocks.has_value()) << "allocate(" << n << ") with " << pool.num_free_blocks()
                                  << " free";
  pool.check_invariants();
  return blocks.value_or(std::vector<BlockId>{});
}

TEST(BlockPoolTest, InitialFreeQueueIsOneToNMinusOneInOrder) {
  BlockPool pool(8);
  pool.check_invariants();
  EXPECT_EQ(pool.num_blocks(), 8);
  EXPECT_EQ(pool.num_free_blocks(), 7);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_EQ(values(pool.free_queue()), (V{1, 2, 3, 4, 5, 6, 7}));
  for (int32_t i = 0; i < 8; ++i) EXPECT_EQ(pool.ref_count(BlockId{i}), 0) << "block " << i;
}

TEST(BlockPoolTest, PoolOfOnlyTheNullBlockHasNothingToAllocate) {
  BlockPool pool(1);
  pool.check_invariants();
  EXPECT_EQ(pool.num_free_blocks(), 0);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_TRUE(pool.free_queue().empty());
  EXPECT_FALSE(pool.allocate(1).has_value());
  const auto none = pool.allocate(0);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  pool.check_invariants();
}

TEST(BlockPoolTest, AllocateReturnsExactIdsFromTheFront) {
  BlockPool pool(8);
  EXPECT_EQ(values(take(pool, 3)), (V{1, 2, 3}));
  EXPECT_EQ(values(pool.free_queue()), (V{4, 5, 6, 7}));
  EXPECT_EQ(values(take(pool, 1)), (V{4}));
  EXPECT_EQ(values(take(pool, 2)), (V{5, 6}));
  EXPECT_EQ(values(pool.free_queue()), (V{7}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_EQ(pool.num_used_blocks(), 6);
  for (int32_t i = 1; i <= 6; ++i) EXPECT_EQ(pool.ref_count(BlockId{i}), 1);
  EXPECT_EQ(pool.ref_count(BlockId{7}), 0);
}

TEST(BlockPoolTest, AllocateZeroReturnsNothingAndChangesNothing) {
  BlockPool pool(4);
  const PoolSnapshot before(pool);
  const auto none = pool.allocate(0);
  pool.check_invariants();
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(PoolSnapshot(pool), before);
}

TEST(BlockPoolTest, FreePushesToTheBackInTheGivenOrder) {
  BlockPool pool(8);
  take(pool, 7);
  pool.free(ids({5, 2, 7}));
  pool.check_invariants();
  EXPECT_EQ(values(pool.free_queue()), (V{5, 2, 7}));
  pool.free(ids({1}));
  pool.check_invariants();
  EXPECT_EQ(values(pool.free_queue()), (V{5, 2, 7, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.num_used_blocks(), 3);
}

TEST(BlockPoolTest, FreedBlocksAreReusedOldestFirst) {
  BlockPool pool(6);  // blocks 1..5
  take(pool, 5);
  pool.free(ids({3}));
  pool.check_invariants();
  pool.free(ids({1}));
  pool.check_invariants();
  pool.free(ids({5}));
  pool.check_invariants();
  // The block freed longest ago is evicted (reused) first.
  EXPECT_EQ(values(take(pool, 1)), (V{3}));
  pool.free(ids({3}));  // back to the end of the queue
  pool.check_invariants();
  EXPECT_EQ(values(pool.free_queue()), (V{1, 5, 3}));
  EXPECT_EQ(values(take(pool, 2)), (V{1, 5}));
  EXPECT_EQ(values(take(pool, 1)), (V{3}));
  EXPECT_FALSE(pool.allocate(1).has_value());
}

TEST(BlockPoolTest, FreeingBlocksNeverAllocatedBeforeReusesInFreeOrder) {
  // Blocks that were never handed out stay ahead of blocks freed later.
  BlockPool pool(8);
  EXPECT_EQ(values(take(pool, 2)), (V{1, 2}));
  pool.free(ids({2, 1}));
  pool.check_invariants();
  EXPECT_EQ(values(pool.free_queue()), (V{3, 4, 5, 6, 7, 2, 1}));
  EXPECT_EQ(values(take(pool, 6)), (V{3, 4, 5, 6, 7, 2}));
}

TEST(BlockPoolTest, AddRefKeepsASharedBlockOutOfTheQueueUntilItsLastFree) {
  BlockPool pool(5);
  const std::vector<BlockId> blocks = take(pool, 2);  // {1, 2}
  pool.add_ref(ids({1}));
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(BlockId{1}), 2);
  EXPECT_EQ(pool.ref_count(BlockId{2}), 1);
  EXPECT_EQ(pool.num_used_blocks(), 2) << "sharing does not use more blocks";

  pool.free(blocks);  // one sequence lets go of both
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(BlockId{1}), 1);
  EXPECT_EQ(pool.ref_count(BlockId{2}), 0);
  EXPECT_EQ(values(pool.free_queue()), (V{3, 4, 2}));

  pool.free(ids({1}));  // the other one does too
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(BlockId{1}), 0);
  EXPECT_EQ(values(pool.free_queue()), (V{3, 4, 2, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(BlockPoolTest, AddRefCountsEveryOccurrence) {
  BlockPool pool(4);
  take(pool, 2);
  pool.add_ref(ids({1, 1, 2}));
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(BlockId{1}), 3);
  EXPECT_EQ(pool.ref_count(BlockId{2}), 2);
  pool.free(ids({1, 2, 1}));
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(BlockId{1}), 1);
  EXPECT_EQ(pool.ref_count(BlockId{2}), 1);
  pool.free(ids({2, 1}));
  pool.check_invariants();
  EXPECT_EQ(values(pool.free_queue()), (V{3, 2, 1}));
}

TEST(BlockPoolTest, NullBlockIsNeverHandedOut) {
  BlockPool pool(16);
  const std::vector<BlockId> all = take(pool, 15);
  for (const BlockId b : all) EXPECT_NE(b, kNullBlock);
  EXPECT_FALSE(pool.allocate(1).has_value());
  pool.check_invariants();
  pool.free(all);
  pool.check_invariants();
  const std::vector<BlockId> again = take(pool, 15);
  for (const BlockId b : again) EXPECT_NE(b, kNullBlock);
  EXPECT_EQ(pool.ref_count(kNullBlock), 0);
}

TEST(BlockPoolTest, FreeIgnoresTheNullBlock) {
  BlockPool pool(6);
  take(pool, 3);
  const PoolSnapshot before(pool);
  pool.free(ids({0}));
  pool.free(ids({0, 0}));
  pool.check_invariants();
  EXPECT_EQ(PoolSnapshot(pool), before);
  // Padding entries in a block table point at the null block; freeing the table skips them.
  pool.free(ids({0, 2, 0, 1}));
  pool.check_invariants();
  EXPECT_EQ(values(pool.free_queue()), (V{4, 5, 2, 1}));
  EXPECT_EQ(pool.ref_count(kNullBlock), 0);
}

TEST(BlockPoolTest, AddRefIgnoresTheNullBlock) {
  BlockPool pool(4);
  take(pool, 1);
  const PoolSnapshot before(pool);
  pool.add_ref(ids({0}));
  pool.check_invariants();
  EXPECT_EQ(PoolSnapshot(pool), before);
}

TEST(BlockPoolTest, FailedAllocationLeavesPoolUnchanged) {
  BlockPool pool(8);
  take(pool, 6);
  pool.free(ids({4, 2}));  // queue: 7, 4, 2 -- not in id order
  pool.add_ref(ids({1}));
  pool.check_invariants();
  const PoolSnapshot before(pool);
  ASSERT_EQ(before.free_queue, (V{7, 4, 2}));
  for (const int32_t n : {4, 5, 100}) {
    EXPECT_FALSE(pool.allocate(n).has_value()) << n;
    pool.check_invariants();
    EXPECT_EQ(PoolSnapshot(pool), before) << "after allocate(" << n << ")";
  }
  // And the pool still works: exactly what was free, in queue order.
  EXPECT_EQ(values(take(pool, 3)), (V{7, 4, 2}));
}

TEST(BlockPoolTest, CanAllocateHasNoSideEffects) {
  BlockPool pool(6);
  take(pool, 2);
  pool.free(ids({1}));
  const PoolSnapshot before(pool);  // 4 free: 3, 4, 5, 1
  for (int32_t n = -2; n <= 7; ++n) {
    EXPECT_EQ(pool.can_allocate(n), n >= 0 && n <= 4) << n;
    pool.check_invariants();
    EXPECT_EQ(PoolSnapshot(pool), before) << "after can_allocate(" << n << ")";
  }
}

TEST(BlockPoolTest, CanAllocateAgreesWithAllocate) {
  for (int32_t n = 0; n <= 6; ++n) {
    BlockPool pool(5);
    const bool can = pool.can_allocate(n);  // asked first: allocate must not run before it
    EXPECT_EQ(can, pool.allocate(n).has_value()) << n;
    pool.check_invariants();
  }
}

TEST(BlockPoolTest, NumUsedPlusNumFreeIsAllButTheNullBlock) {
  BlockPool pool(10);
  std::vector<std::vector<BlockId>> held;
  for (const int32_t n : {2, 3, 1, 3}) {
    held.push_back(take(pool, n));
    EXPECT_EQ(pool.num_used_blocks() + pool.num_free_blocks(), 9);
  }
  for (const auto& blocks : held) {
    pool.free(blocks);
    pool.check_invariants();
    EXPECT_EQ(pool.num_used_blocks() + pool.num_free_blocks(), 9);
  }
  EXPECT_EQ(pool.num_free_blocks(), 9);
}

// ---- programmer errors abort -----------------------------------------------------------------

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  BlockPool pool(4);
  const std::vector<BlockId> blocks = take(pool, 1);
  pool.free(blocks);
  EXPECT_DEATH(pool.free(blocks), "double free");
}

TEST(BlockPoolDeathTest, FreeingTheSameBlockTwiceInOneCallAborts) {
  BlockPool pool(4);
  take(pool, 1);
  EXPECT_DEATH(pool.free(ids({1, 1})), "double free");
}

TEST(BlockPoolDeathTest, FreeOfANeverAllocatedBlockAborts) {
  BlockPool pool(4);
  EXPECT_DEATH(pool.free(ids({2})), "double free");
}

TEST(BlockPoolDeathTest, OutOfRangeIdsAbort) {
  BlockPool pool(4);
  take(pool, 3);
  EXPECT_DEATH(pool.free(ids({4})), "free: block id out of range");
  EXPECT_DEATH(pool.free(ids({-1})), "free: block id out of range");
  EXPECT_DEATH(pool.add_ref(ids({4})), "add_ref: block id out of range");
  EXPECT_DEATH((void)pool.ref_count(BlockId{4}), "ref_count: block id out of range");
  EXPECT_DEATH((void)pool.ref_count(BlockId{-1}), "ref_count: block id out of range");
}

TEST(BlockPoolDeathTest, AddRefOnAFreeBlockAborts) {
  BlockPool pool(4);
  EXPECT_DEATH(pool.add_ref(ids({1})), "add_ref on a free block");
}

TEST(BlockPoolDeathTest, NegativeAllocateAborts) {
  BlockPool pool(4);
  EXPECT_DEATH((void)pool.allocate(-1), "negative block count");
}

TEST(BlockPoolDeathTest, PoolWithoutTheNullBlockAborts) {
  EXPECT_DEATH(BlockPool pool(0), "at least the null block");
}

}  // namespace
}  // namespace strata::kv

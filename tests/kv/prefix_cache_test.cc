// BlockPool's prefix cache: hits confirmed against tokens, parent and extra keys; freed cached
// blocks keep their content until reallocated, least recently freed first; touch takes a free
// cached block out of the queue; events and counters; invariants after every operation.

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "kv/block_pool.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::ids;
using test_util::PoolSnapshot;
using test_util::values;
using V = std::vector<int32_t>;
using T = std::vector<int32_t>;

constexpr int32_t kBs = 4;

class PrefixCachePoolTest : public ::testing::Test {
 protected:
  PrefixCachePoolTest()
      : pool_(BlockPoolConfig{.num_blocks = 6,
                              .block_size = kBs,
                              .enable_prefix_caching = true,
                              .event_sink = &events_}) {}

  std::vector<BlockId> take(int32_t n) {
    auto blocks = pool_.allocate(n);
    EXPECT_TRUE(blocks.has_value());
    pool_.check_invariants();
    return blocks.value_or(std::vector<BlockId>{});
  }
  // Caches block b as a first block (parent null) holding tokens.
  BlockHash cache_first(BlockId b, const T& tokens, const BlockExtraKeys& extra = {}) {
    const BlockHash h = hasher_.hash(nullptr, tokens, extra);
    EXPECT_TRUE(pool_.cache_block(b, h, nullptr, kNullBlock, tokens, extra));
    pool_.check_invariants();
    return h;
  }

  RecordingKvEventSink events_;
  BlockPool pool_;
  BlockHasher hasher_;
};

TEST_F(PrefixCachePoolTest, HitNeedsSameTokensParentAndExtraKeys) {
  const std::vector<BlockId> b = take(2);  // {1, 2}
  const T t0 = {1, 2, 3, 4}, t1 = {5, 6, 7, 8};
  const BlockHash h0 = cache_first(b[0], t0, {"s", 0});
  const BlockHash h1 = hasher_.hash(&h0, t1, {"s", 0});
  ASSERT_TRUE(pool_.cache_block(b[1], h1, &h0, b[0], t1, {"s", 0}));
  pool_.check_invariants();
  EXPECT_EQ(pool_.num_cached_blocks(), 2);

  EXPECT_EQ(pool_.find_cached(h0, kNullBlock, t0, {"s", 0}), BlockId{1});
  EXPECT_EQ(pool_.find_cached(h1, BlockId{1}, t1, {"s", 0}), BlockId{2});
  EXPECT_EQ(pool_.find_cached(h0, kNullBlock, t1, {"s", 0}), std::nullopt) << "other tokens";
  EXPECT_EQ(pool_.find_cached(h0, kNullBlock, t0, {"x", 0}), std::nullopt) << "other salt";
  EXPECT_EQ(pool_.find_cached(h0, kNullBlock, t0, {"s", 1}), std::nullopt) << "other adapter";
  EXPECT_EQ(pool_.find_cached(h1, BlockId{3}, t1, {"s", 0}), std::nullopt) << "other parent";
  EXPECT_EQ(pool_.find_cached(h1, kNullBlock, t1, {"s", 0}), std::nullopt) << "not a first block";
}

TEST_F(PrefixCachePoolTest, FreedCachedBlocksAreEvictedLeastRecentlyFreedFirst) {
  const std::vector<BlockId> b = take(3);  // {1, 2, 3}; queue 4, 5
  const BlockHash h1 = cache_first(b[0], {1, 1, 1, 1});
  const BlockHash h3 = cache_first(b[2], {3, 3, 3, 3});
  pool_.free(ids({3, 1, 2}));
  pool_.check_invariants();
  EXPECT_EQ(values(pool_.free_queue()), (V{4, 5, 3, 1, 2}));
  EXPECT_EQ(pool_.num_cached_blocks(), 2) << "freed blocks keep their content";
  EXPECT_EQ(pool_.find_cached(h1, kNullBlock, T{1, 1, 1, 1}, {}), BlockId{1});

  EXPECT_EQ(values(take(2)), (V{4, 5})) << "never-cached blocks first";
  EXPECT_EQ(pool_.num_evictions(), 0);
  EXPECT_EQ(values(take(1)), (V{3})) << "then the block freed longest ago";
  EXPECT_EQ(pool_.num_evictions(), 1);
  EXPECT_FALSE(pool_.is_cached(BlockId{3}));
  EXPECT_EQ(pool_.find_cached(h3, kNullBlock, T{3, 3, 3, 3}, {}), std::nullopt);
  EXPECT_EQ(pool_.find_cached(h1, kNullBlock, T{1, 1, 1, 1}, {}), BlockId{1});
  ASSERT_EQ(events_.stored.size(), 2u);
  ASSERT_EQ(events_.removed.size(), 1u);
  EXPECT_EQ(events_.removed[0].hash, h3);
  EXPECT_EQ(events_.removed[0].block_id, BlockId{3});
}

TEST_F(PrefixCachePoolTest, StoredEventsCarryTokensAndParentHash) {
  const std::vector<BlockId> b = take(2);
  const T t0 = {1, 2, 3, 4}, t1 = {5, 6, 7, 8};
  const BlockHash h0 = cache_first(b[0], t0);
  const BlockHash h1 = hasher_.hash(&h0, t1, {});
  ASSERT_TRUE(pool_.cache_block(b[1], h1, &h0, b[0], t1, {}));
  ASSERT_EQ(events_.stored.size(), 2u);
  EXPECT_EQ(events_.stored[0].hash, h0);
  EXPECT_EQ(events_.stored[0].parent_hash, std::nullopt);
  EXPECT_EQ(T(events_.stored[0].token_ids.begin(), events_.stored[0].token_ids.end()), t0);
  EXPECT_EQ(events_.stored[1].parent_hash, h0);
  EXPECT_EQ(T(events_.stored[1].token_ids.begin(), events_.stored[1].token_ids.end()), t1);
  EXPECT_EQ(events_.stored[1].block_id, b[1]);
}

TEST_F(PrefixCachePoolTest, ResetDropsEveryCachedBlockOnlyWhenNoneIsInUse) {
  const std::vector<BlockId> b = take(2);
  const BlockHash h1 = cache_first(b[0], {1, 1, 1, 1});
  cache_first(b[1], {2, 2, 2, 2});
  pool_.free(ids({1}));
  const PoolSnapshot before(pool_);
  EXPECT_FALSE(pool_.reset_prefix_cache()) << "block 2 is still in use";
  EXPECT_EQ(PoolSnapshot(pool_), before);
  EXPECT_EQ(events_.num_cleared, 0);

  pool_.free(ids({2}));
  EXPECT_TRUE(pool_.reset_prefix_cache());
  pool_.check_invariants();
  EXPECT_EQ(pool_.num_cached_blocks(), 0);
  EXPECT_EQ(pool_.find_cached(h1, kNullBlock, T{1, 1, 1, 1}, {}), std::nullopt);
  EXPECT_EQ(events_.num_cleared, 1);
  EXPECT_TRUE(events_.removed.empty()) << "one AllBlocksCleared, no BlockRemoved per block";
  EXPECT_EQ(pool_.num_evictions(), 0);
  EXPECT_EQ(values(take(5)), (V{3, 4, 5, 1, 2})) << "the queue order is kept";
}

TEST_F(PrefixCachePoolTest, TouchTakesAFreeCachedBlockOutOfTheQueue) {
  const std::vector<BlockId> b = take(2);
  cache_first(b[0], {1, 1, 1, 1});
  cache_first(b[1], {2, 2, 2, 2});
  pool_.free(b);
  EXPECT_EQ(values(pool_.free_queue()), (V{3, 4, 5, 1, 2}));
  pool_.touch(ids({2}));
  pool_.check_invariants();
  EXPECT_EQ(values(pool_.free_queue()), (V{3, 4, 5, 1}));
  EXPECT_EQ(pool_.ref_count(BlockId{2}), 1);
  pool_.touch(ids({2}));  // a second sequence shares it
  pool_.check_invariants();
  EXPECT_EQ(pool_.ref_count(BlockId{2}), 2);
  EXPECT_EQ(pool_.num_free_blocks(), 4);
  pool_.free(ids({2, 2}));
  pool_.check_invariants();
  EXPECT_EQ(values(pool_.free_queue()), (V{3, 4, 5, 1, 2})) << "back to the tail: recently used";
  EXPECT_EQ(pool_.num_evictions(), 0);
}

TEST_F(PrefixCachePoolTest, IdenticalBlockIsNotCachedTwice) {
  const std::vector<BlockId> b = take(2);
  const BlockHash h = cache_first(b[0], {9, 9, 9, 9});
  const PoolSnapshot before(pool_);
  EXPECT_FALSE(pool_.cache_block(b[1], h, nullptr, kNullBlock, T{9, 9, 9, 9}, {}));
  pool_.check_invariants();
  EXPECT_EQ(PoolSnapshot(pool_), before);
  EXPECT_EQ(events_.stored.size(), 1u);
}

TEST_F(PrefixCachePoolTest, ChildOfAnEvictedParentIsNotConfirmedByNewContent) {
  const std::vector<BlockId> b = take(2);  // {1, 2}
  const T parent_tokens = {1, 2, 3, 4}, child_tokens = {5, 6, 7, 8};
  const BlockHash hp = cache_first(b[0], parent_tokens);
  const BlockHash hc = hasher_.hash(&hp, child_tokens, {});
  ASSERT_TRUE(pool_.cache_block(b[1], hc, &hp, b[0], child_tokens, {}));
  pool_.free(ids({1}));  // the parent goes first (a misbehaving caller), the child stays in use
  take(4);               // 3, 4, 5, then block 1: evicted
  EXPECT_EQ(pool_.num_evictions(), 1);
  EXPECT_FALSE(pool_.is_cached(BlockId{1}));
  cache_first(BlockId{1}, {7, 7, 7, 7});  // other content in block 1
  EXPECT_EQ(pool_.find_cached(hc, BlockId{1}, child_tokens, {}), std::nullopt)
      << "block 1 was re-cached with other content: it must not vouch for the old child";
}

TEST_F(PrefixCachePoolTest, CollidingHashesAreChainedAndTellContentApart) {
  BlockHasher weak(1);  // one bit: everything collides with probability 1/2
  const std::vector<BlockId> b = take(4);
  std::vector<T> contents = {{1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0}, {4, 0, 0, 0}};
  std::vector<BlockHash> hashes;
  for (size_t i = 0; i < b.size(); ++i) {
    hashes.push_back(weak.hash(nullptr, contents[i], {}));
    ASSERT_TRUE(pool_.cache_block(b[i], hashes[i], nullptr, kNullBlock, contents[i], {}));
    pool_.check_invariants();
  }
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(pool_.find_cached(hashes[i], kNullBlock, contents[i], {}), b[i]);
  }
  pool_.free(b);
  take(1);  // block 5
  take(2);  // blocks 1 and 2: evicted from the middle of their chains
  pool_.check_invariants();
  EXPECT_EQ(pool_.find_cached(hashes[0], kNullBlock, contents[0], {}), std::nullopt);
  EXPECT_EQ(pool_.find_cached(hashes[3], kNullBlock, contents[3], {}), BlockId{4});
  EXPECT_EQ(pool_.find_cached(hashes[2], kNullBlock, contents[2], {}), BlockId{3});
}

TEST(PrefixCachePoolDeathTest, MisuseAborts) {
  BlockPool off(4);
  EXPECT_DEATH((void)off.find_cached(BlockHash{}, kNullBlock, T{1, 2, 3, 4}, {}),
               "prefix caching is off");
  BlockPool pool(BlockPoolConfig{.num_blocks = 4, .block_size = 4, .enable_prefix_caching = true});
  EXPECT_DEATH(pool.touch(ids({1})), "not cached");
  EXPECT_DEATH(
      (void)pool.cache_block(BlockId{1}, BlockHash{}, nullptr, kNullBlock, T{1, 2, 3, 4}, {}),
      "block free or already cached");
  auto b = pool.allocate(1);
  EXPECT_DEATH((void)pool.cache_block(b->front(), BlockHash{}, nullptr, kNullBlock, T{1, 2}, {}),
               "block not full");
}

}  // namespace
}  // namespace strata::kv

// Sliding-window block release in the KV space layer: blocks wholly before a sequence's window go
// back to the pool (entries become the null block, the last block always stays), a sequence of
// ten windows holds at most ceil(window / block_size) + 1 blocks, a prefix hit leaves its
// out-of-window blocks out, and forks share the skipped entries. Invariants after every call.

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/kv_accounting.h"
#include "kv/kv_cache_manager.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::PoolSnapshot;
using test_util::values;
using V = std::vector<int32_t>;

constexpr int32_t kBs = 4;
constexpr int32_t kWindow = 6;  // straddles at most ceil(6 / 4) + 1 = 3 blocks

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

KvCacheManager windowed(int32_t num_blocks, bool caching = true) {
  return KvCacheManager(KvCacheConfig{.block_size = kBs,
                                      .enable_prefix_caching = caching,
                                      .groups = {{KvGroupSpec::windowed(kWindow, {}), num_blocks}}});
}

TEST(SlidingWindowTest, FreesWholeBlocksBeforeThePositionAndKeepsTheLastBlock) {
  KvCacheManager m = windowed(9, /*caching=*/false);
  BlockTable t(kBs);
  ASSERT_TRUE(m.allocate_slots(t, 13));  // blocks 1..4, the last holding one token
  EXPECT_EQ(values(t.blocks()), (V{1, 2, 3, 4}));
  m.free_blocks_before(t, 7);  // position 7 is in block 1 (index): only index 0 goes
  EXPECT_EQ(values(t.blocks()), (V{0, 2, 3, 4}));
  EXPECT_EQ(t.num_skipped_blocks(), 1);
  EXPECT_EQ(values(m.pool().free_queue()), (V{5, 6, 7, 8, 1}));
  m.free_blocks_before(t, 7);  // idempotent
  EXPECT_EQ(m.pool().num_free_blocks(), 5);
  m.free_blocks_before(t, 1000);  // never the last block
  EXPECT_EQ(values(t.blocks()), (V{0, 0, 0, 4}));
  EXPECT_EQ(t.num_tokens(), 13) << "positions keep their numbering";
  EXPECT_EQ(t.slot(12), 4 * kBs);
  m.pool().check_invariants();
  m.free(t);
  EXPECT_EQ(m.pool().num_used_blocks(), 0);
  m.pool().check_invariants();
}

TEST(SlidingWindowTest, ASequenceOfTenWindowsHoldsAtMostTheWindowsBlocksPlusOne) {
  KvCacheManager m = windowed(5);
  const int64_t bound = blocks_held_per_sequence(10 * kWindow, kWindow, kBs);
  ASSERT_EQ(bound, 3);
  const std::vector<int32_t> tokens = iota_tokens(10 * kWindow);
  BlockTable t(kBs);
  for (int32_t pos = 0; pos < 10 * kWindow; ++pos) {  // one decode step per token
    m.free_unneeded_blocks(t, t.num_tokens());
    ASSERT_TRUE(m.allocate_slots(t, 1)) << "position " << pos;
    EXPECT_LE(t.blocks().size() - static_cast<size_t>(t.num_skipped_blocks()), bound);
    EXPECT_LE(m.pool().num_used_blocks(), bound);
    m.cache_full_blocks(t, tokens, pos + 1, {});
    m.pool().check_invariants();
  }
  m.free(t);
  EXPECT_EQ(m.pool().num_used_blocks(), 0);
}

TEST(SlidingWindowTest, APrefixHitLeavesOutTheBlocksBeforeItsWindow) {
  KvCacheManager m = windowed(9);
  const std::vector<int32_t> prompt = iota_tokens(17);  // four full blocks + one token
  BlockTable a(kBs);
  ASSERT_TRUE(m.allocate_slots(a, 17));
  m.cache_full_blocks(a, prompt, 17, {});
  EXPECT_EQ(values(a.blocks()), (V{1, 2, 3, 4, 5}));
  m.free(a);

  const PrefixHit hit = m.find_cached_prefix(prompt, {});
  // 16 cached tokens; the first query is at 16, its window starts at 11 (block index 2).
  EXPECT_EQ(hit.num_tokens, 16);
  EXPECT_EQ(values(hit.blocks()), (V{0, 0, 3, 4}));
  const PoolSnapshot before(m.pool());
  EXPECT_EQ(m.num_blocks_to_allocate(a, 1, &hit), 3) << "blocks 3 and 4 (free) and one new";
  EXPECT_EQ(PoolSnapshot(m.pool()), before);
  ASSERT_TRUE(m.allocate_slots(a, 1, &hit));
  EXPECT_EQ(values(a.blocks()), (V{0, 0, 3, 4, 6})) << "the new block comes from the queue front";
  EXPECT_EQ(a.num_skipped_blocks(), 2);
  EXPECT_EQ(m.pool().ref_count(BlockId{1}), 0);
  m.pool().check_invariants();

  BlockTable child(kBs);
  m.fork(a, child);
  EXPECT_EQ(values(child.blocks()), values(a.blocks()));
  EXPECT_EQ(child.num_skipped_blocks(), 2);
  EXPECT_EQ(m.pool().ref_count(BlockId{3}), 2);
  m.free(child);
  m.free(a);
  EXPECT_EQ(m.pool().num_used_blocks(), 0);
  m.pool().check_invariants();
}

TEST(SlidingWindowTest, PoolWindowNeedsEveryLayerWindowed) {
  EXPECT_EQ(pool_sliding_window(std::vector<int32_t>{4096, 4096}), 4096);
  EXPECT_EQ(pool_sliding_window(std::vector<int32_t>{512, 4096}), 4096);
  EXPECT_EQ(pool_sliding_window(std::vector<int32_t>{4096, 0}), 0) << "hybrid: keep everything";
  EXPECT_EQ(pool_sliding_window(std::vector<int32_t>{}), 0);
  EXPECT_EQ(blocks_held_per_sequence(32768, 4096, 16), 257);
  EXPECT_EQ(blocks_held_per_sequence(100, 4096, 16), 7);
  EXPECT_EQ(blocks_held_per_sequence(100, 0, 16), 7);
  // A request's need: every block without a window; with one, the window and a chunk + 1.
  EXPECT_EQ(blocks_needed_per_request(100, 0, 2048, 16), 7);
  EXPECT_EQ(blocks_needed_per_request(100, 64, 2048, 16), 12);  // ceil((64 + 100) / 16) + 1
  EXPECT_EQ(blocks_needed_per_request(700, 64, 16, 16), 6);      // ceil((64 + 16) / 16) + 1
}

}  // namespace
}  // namespace strata::kv

// The INT4 (KIVI) residual pool in KvCacheManager: which residual blocks a table holds before and
// after each step (exact ids, R = 1 and 2), what allocate_slots gives back first, all-or-nothing
// allocation across both pools, fork sharing with copy-on-write of the partly filled residual
// block, prefix hits (R = 1 starts the residual at the hit; R > 1 takes the cached residual
// copies of the hit's last R - 1 blocks, and a hit shortens when they were evicted), freeing, the
// sizing formula, and the layout builder's residual arrays. Invariants after every call.

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/paged_layout_builder.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::held;
using test_util::PoolSnapshot;
using test_util::values;
using V = std::vector<int32_t>;

constexpr int32_t kBs = 4;

class ResidualPoolTest : public ::testing::Test {
 protected:
  KvCacheManager make(int32_t r, int32_t residual_num_blocks = 9, int32_t num_blocks = 9) {
    return KvCacheManager(KvCacheConfig{
        .block_size = kBs,
        .groups = {{KvGroupSpec{}, num_blocks}, {KvGroupSpec::newest(r, {}), residual_num_blocks}}});
  }
  static void check(const KvCacheManager& m, std::vector<const BlockTable*> tables) {
    m.check_invariants(tables);
  }
};

TEST_F(ResidualPoolTest, EntriesCoverTheWindowAndOlderOnesGoBackWithExactIds) {
  KvCacheManager m = make(/*r=*/2);
  BlockTable t(kBs);
  ASSERT_TRUE(m.allocate_slots(t, 10));  // positions 0..9: blocks 0, 1, 2 all in the chunk
  check(m, {&t});
  EXPECT_EQ(values(t.blocks()), (V{1, 2, 3}));
  EXPECT_EQ(t.num_skipped_blocks(1), 0);
  EXPECT_EQ(values(held(t.blocks(1))), (V{1, 2, 3}));
  EXPECT_EQ(t.slot(9, 1), 3 * kBs + 1);
  // The next query (position 10) reads blocks 2 - 2 + 1 = 1 and 2 at full precision.
  m.free_unneeded_blocks(t, 10);
  check(m, {&t});
  EXPECT_EQ(t.num_skipped_blocks(1), 1);
  EXPECT_EQ(values(held(t.blocks(1))), (V{2, 3}));
  EXPECT_EQ(values(m.pool(1).free_queue()), (V{4, 5, 6, 7, 8, 1}));
  ASSERT_TRUE(m.allocate_slots(t, 1));  // position 10: no new block
  EXPECT_EQ(values(held(t.blocks(1))), (V{2, 3}));
  ASSERT_TRUE(m.allocate_slots(t, 2));  // positions 11, 12: block 3 is new in both pools
  check(m, {&t});
  EXPECT_EQ(values(t.blocks()), (V{1, 2, 3, 4}));
  EXPECT_EQ(t.num_skipped_blocks(1), 1);
  EXPECT_EQ(values(held(t.blocks(1))), (V{2, 3, 4}));
  // Without free_residual_before, allocate_slots gives back what the step no longer reads first.
  ASSERT_TRUE(m.allocate_slots(t, 1));  // position 13 reads blocks 2 and 3
  check(m, {&t});
  EXPECT_EQ(t.num_skipped_blocks(1), 2);
  EXPECT_EQ(values(held(t.blocks(1))), (V{3, 4}));
  EXPECT_EQ(values(m.pool(1).free_queue()), (V{5, 6, 7, 8, 1, 2}));
  m.free(t);
  check(m, {});
  EXPECT_EQ(m.pool(1).num_used_blocks(), 0);
  EXPECT_EQ(m.pool().num_used_blocks(), 0);
  EXPECT_TRUE(held(t.blocks(1)).empty());
  EXPECT_EQ(values(m.pool(1).free_queue()), (V{5, 6, 7, 8, 1, 2, 4, 3})) << "tail first";
}

TEST_F(ResidualPoolTest, WithROneAFilledBlockLeavesTheResidualWhenTheNextBlockStarts) {
  KvCacheManager m = make(/*r=*/1);
  BlockTable t(kBs);
  ASSERT_TRUE(m.allocate_slots(t, 4));
  EXPECT_EQ(values(held(t.blocks(1))), (V{1}));
  ASSERT_TRUE(m.allocate_slots(t, 1));  // position 4 reads only its own block 1
  check(m, {&t});
  EXPECT_EQ(t.num_skipped_blocks(1), 1);
  EXPECT_EQ(values(held(t.blocks(1))), (V{2}));
  EXPECT_EQ(m.pool(1).num_used_blocks(), 1);
  // Decoding to the end of a block and one past: never more than R + 1 = 2 at once.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(m.allocate_slots(t, 1));
    m.free_unneeded_blocks(t, t.num_tokens());
    EXPECT_LE(m.pool(1).num_used_blocks(), 1);
  }
  EXPECT_EQ(t.num_tokens(), 8);
  EXPECT_TRUE(held(t.blocks(1)).empty()) << "position 8 starts block 2: nothing to keep";
  EXPECT_EQ(t.num_skipped_blocks(1), 2);
  ASSERT_TRUE(m.allocate_slots(t, 1));
  EXPECT_EQ(t.num_skipped_blocks(1), 2);
  EXPECT_EQ(held(t.blocks(1)).size(), 1u);
  check(m, {&t});
  m.free(t);
}

TEST_F(ResidualPoolTest, AllocationIsAllOrNothingAcrossBothPools) {
  KvCacheManager m = make(/*r=*/1, /*residual_num_blocks=*/3);
  BlockTable a(kBs);
  BlockTable b(kBs);
  ASSERT_TRUE(m.allocate_slots(a, 8));  // residual 1, 2: the residual pool is full
  EXPECT_EQ(values(held(a.blocks(1))), (V{1, 2}));
  const PoolSnapshot main_before(m.pool());
  const PoolSnapshot res_before(m.pool(1));
  EXPECT_EQ(m.num_blocks_to_allocate(b, 1), 1);
  EXPECT_EQ(m.num_blocks_to_allocate(b, 1, nullptr, 1), 1);
  EXPECT_FALSE(m.can_allocate(b, 1));
  EXPECT_FALSE(m.allocate_slots(b, 1)) << "the main pool has room, the residual pool none";
  EXPECT_EQ(PoolSnapshot(m.pool()), main_before);
  EXPECT_EQ(PoolSnapshot(m.pool(1)), res_before);
  EXPECT_TRUE(b.blocks().empty());
  EXPECT_TRUE(held(b.blocks(1)).empty());
  check(m, {&a, &b});
  // a's next position (8) reads only block 2: the two it holds come back before it takes one.
  EXPECT_TRUE(m.can_allocate(a, 1));
  ASSERT_TRUE(m.allocate_slots(a, 1));
  EXPECT_EQ(values(held(a.blocks(1))), (V{1}));
  EXPECT_EQ(a.num_skipped_blocks(1), 2);
  ASSERT_TRUE(m.allocate_slots(b, 1));
  EXPECT_EQ(values(held(b.blocks(1))), (V{2}));
  check(m, {&a, &b});
  m.free(a);
  m.free(b);
  check(m, {});
}

TEST_F(ResidualPoolTest, ForkSharesResidualBlocksAndCopiesThePartlyFilledOne) {
  KvCacheManager m = make(/*r=*/2);
  BlockTable parent(kBs);
  ASSERT_TRUE(m.allocate_slots(parent, 6));  // block 1 holds positions 4, 5
  BlockTable child(kBs);
  m.fork(parent, child);
  check(m, {&parent, &child});
  EXPECT_EQ(values(held(child.blocks(1))), (V{1, 2}));
  EXPECT_EQ(m.pool(1).ref_count(BlockId{2}), 2);
  ASSERT_TRUE(m.allocate_slots(child, 1));  // position 6 would land in the shared block
  check(m, {&parent, &child});
  EXPECT_EQ(values(held(child.blocks(1))), (V{1, 3}));
  EXPECT_EQ(m.take_pending_copies(1), (std::vector<BlockCopy>{{BlockId{2}, BlockId{3}}}));
  EXPECT_EQ(m.take_pending_copies(), (std::vector<BlockCopy>{{BlockId{2}, BlockId{3}}}))
      << "the main pool's copy-on-write, queued apart";
  EXPECT_EQ(values(held(parent.blocks(1))), (V{1, 2}));
  EXPECT_EQ(m.pool(1).ref_count(BlockId{1}), 2) << "a full residual block stays shared";
  EXPECT_EQ(m.pool(1).ref_count(BlockId{2}), 1);
  // The parent writes its own block without a copy now.
  ASSERT_TRUE(m.allocate_slots(parent, 1));
  EXPECT_TRUE(m.take_pending_copies(1).empty());
  m.free(parent);
  m.free(child);
  check(m, {});
  EXPECT_EQ(m.pool(1).num_used_blocks(), 0);
}

std::vector<int32_t> tokens(int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 100);
  return t;
}

TEST_F(ResidualPoolTest, WithROneAPrefixHitStartsTheResidualAtTheHit) {
  KvCacheManager m = make(/*r=*/1);
  const std::vector<int32_t> prompt = tokens(9);
  BlockTable a(kBs);
  ASSERT_TRUE(m.allocate_slots(a, 9));
  m.cache_full_blocks(a, prompt, 9, {});
  m.free(a);
  std::vector<int32_t> longer = tokens(11);
  const PrefixHit hit = m.find_cached_prefix(longer, {});
  ASSERT_EQ(hit.num_tokens, 8) << "R = 1: the whole hit is exact";
  BlockTable b(kBs);
  EXPECT_EQ(m.num_blocks_to_allocate(b, 3, &hit, 1), 1);
  ASSERT_TRUE(m.allocate_slots(b, 3, &hit));
  check(m, {&b});
  EXPECT_EQ(values(b.blocks()), (V{1, 2, 4}));
  EXPECT_EQ(b.num_skipped_blocks(1), 2) << "the hit's blocks are only read as int4";
  EXPECT_EQ(held(b.blocks(1)).size(), 1u);
  m.free(b);
  check(m, {});
}

// R = 2: the first position computed after a hit of h blocks reads block h - 1 at full precision,
// so the hit takes block h - 1's cached residual copy (linked when the block was registered) and
// the table's residual entries start there; the copy is shared, not recomputed.
TEST_F(ResidualPoolTest, WithRTwoAHitTakesTheResidualCopyOfItsLastBlock) {
  KvCacheManager m = make(/*r=*/2);
  const std::vector<int32_t> prompt = tokens(13);
  BlockTable a(kBs);
  ASSERT_TRUE(m.allocate_slots(a, 13));  // blocks 0-3 and their residual blocks 1-4
  EXPECT_EQ(values(held(a.blocks(1))), (V{1, 2, 3, 4}));
  m.cache_full_blocks(a, prompt, 13, {});
  EXPECT_EQ(m.pool().num_cached_blocks(), 3);
  EXPECT_EQ(m.pool(1).num_cached_blocks(), 3) << "each full block's residual copy";
  m.free(a);
  check(m, {});
  const PrefixHit hit = m.find_cached_prefix(tokens(20), {});
  ASSERT_EQ(hit.num_tokens, 12);
  EXPECT_EQ(values(held(hit.blocks(1))), (V{3})) << "block 2's copy";
  BlockTable b(kBs);
  EXPECT_EQ(m.num_blocks_to_allocate(b, 8, &hit, 1), 1 + 2) << "the free copy, blocks 3-4";
  ASSERT_TRUE(m.allocate_slots(b, 8, &hit));
  check(m, {&b});
  EXPECT_EQ(b.num_tokens(), 20);
  EXPECT_EQ(b.num_skipped_blocks(1), 2);
  ASSERT_EQ(held(b.blocks(1)).size(), 3u);
  EXPECT_EQ(held(b.blocks(1))[0], BlockId{3});
  // A second table on the same prefix shares the copy.
  const PrefixHit again = m.find_cached_prefix(tokens(20), {});
  ASSERT_EQ(values(held(again.blocks(1))), (V{3}));
  BlockTable c(kBs);
  ASSERT_TRUE(m.allocate_slots(c, 8, &again));
  check(m, {&b, &c});
  EXPECT_EQ(m.pool(1).ref_count(BlockId{3}), 2);
  m.free(b);
  m.free(c);
  check(m, {});
}

// A residual copy evicted since (its block reused) cuts the hit back to where the R - 1 blocks
// before it still have copies: here none, so no hit; R = 3 needs the last two blocks' copies.
TEST_F(ResidualPoolTest, AnEvictedResidualCopyShortensTheHit) {
  for (const int32_t r : {2, 3}) {
    SCOPED_TRACE("R " + std::to_string(r));
    KvCacheManager m = make(r);
    const std::vector<int32_t> prompt = tokens(13);
    BlockTable a(kBs);
    ASSERT_TRUE(m.allocate_slots(a, 13));
    m.cache_full_blocks(a, prompt, 13, {});
    m.free(a);
    EXPECT_EQ(m.find_cached_prefix(tokens(20), {}).num_tokens, 12);
    // Another sequence takes every free residual block: the cached copies are evicted.
    BlockTable other(kBs);
    const std::vector<int32_t> other_tokens(static_cast<size_t>(8 * kBs - 1), 7);
    ASSERT_TRUE(m.allocate_slots(other, static_cast<int32_t>(other_tokens.size())));
    EXPECT_EQ(m.pool(1).num_free_blocks(), 0);
    const PrefixHit hit = m.find_cached_prefix(tokens(20), {});
    EXPECT_EQ(hit.num_tokens, 0) << "no block's copy is left";
    EXPECT_TRUE(held(hit.blocks(1)).empty());
    m.free(other);
    check(m, {});
  }
}

// The prompt's blocks evicted from the main pool and computed again, while the residual pool kept
// the copies: the identical cached copies are linked to the new blocks (the new table's own
// copies stay uncached), so the prompt hits again in full.
TEST_F(ResidualPoolTest, ACopyKeptWhileTheMainBlockWasComputedAgainIsLinkedToIt) {
  KvCacheManager m = make(/*r=*/2, /*residual_num_blocks=*/12, /*num_blocks=*/6);
  const std::vector<int32_t> prompt = tokens(13);
  BlockTable a(kBs);
  ASSERT_TRUE(m.allocate_slots(a, 13));
  m.cache_full_blocks(a, prompt, 13, {});
  m.free(a);
  // Every main block taken (the prompt's evicted), the residual pool's free blocks only in part.
  BlockTable other(kBs);
  ASSERT_TRUE(m.allocate_slots(other, 5 * kBs - 1));
  m.free(other);
  ASSERT_EQ(m.find_cached_prefix(tokens(20), {}).num_tokens, 0);
  ASSERT_EQ(m.pool(1).num_cached_blocks(), 3) << "the copies are still cached";
  BlockTable again(kBs);
  ASSERT_TRUE(m.allocate_slots(again, 13));
  m.cache_full_blocks(again, prompt, 13, {});
  m.free(again);
  check(m, {});
  const PrefixHit hit = m.find_cached_prefix(tokens(20), {});
  EXPECT_EQ(hit.num_tokens, 12);
  ASSERT_EQ(held(hit.blocks(1)).size(), 1u);
  EXPECT_EQ(m.pool(1).num_cached_blocks(), 3) << "no second copy cached";
}

TEST_F(ResidualPoolTest, WithoutAResidualPoolNothingChanges) {
  KvCacheManager m(KvCacheConfig{.block_size = kBs, .groups = {{KvGroupSpec{}, 9}}});
  EXPECT_EQ(m.num_groups(), 1);
  BlockTable t(kBs);
  ASSERT_TRUE(m.allocate_slots(t, 10));
  EXPECT_EQ(t.num_groups(), 1);
  EXPECT_TRUE(held(t.blocks(1)).empty());
  EXPECT_EQ(m.num_blocks_to_allocate(t, 5), 1);
  m.free_unneeded_blocks(t, 10);
  check(m, {&t});
  m.free(t);
}

TEST(ResidualPoolSizingTest, SchedulerLimitsBoundTheResidualPool) {
  EXPECT_EQ(newest_blocks_pool_size(256, 1, 2048, 16), 256 * 2 + 128 + 1);
  EXPECT_EQ(newest_blocks_pool_size(4, 2, 7, 16), 4 * 3 + 1 + 1);
  KvSpec spec{.num_layers = 3, .num_kv_heads = 2, .head_dim = 64, .dtype = DType::kI8};
  EXPECT_FALSE(needs_newest_blocks_group(spec));
  spec.dtype = DType::kI4;
  EXPECT_TRUE(needs_newest_blocks_group(spec));
  spec.layer_dtypes = {DType::kF32, DType::kI4, DType::kF32};
  EXPECT_TRUE(needs_newest_blocks_group(spec));
  spec.layer_dtypes = {DType::kF32, DType::kF32, DType::kF32};
  EXPECT_FALSE(needs_newest_blocks_group(spec)) << "every int4 layer skipped";
  const KvSpec r = newest_blocks_spec(spec);
  EXPECT_EQ(r.dtype, DType::kF32);
  EXPECT_TRUE(r.layer_dtypes.empty());
  EXPECT_EQ(r.num_layers, 3);
  EXPECT_EQ(r.num_kv_heads, 2);
  EXPECT_EQ(r.head_dim, 64);
}

// The GPU runner keeps its residual pool in bf16 (its activations' precision): the same shape,
// uniform whatever the main pool's exceptions, at half the CPU's F32 bytes.
TEST(ResidualPoolSizingTest, TheResidualSpecTakesTheBackendsFullPrecision) {
  KvSpec spec{.num_layers = 3, .num_kv_heads = 2, .head_dim = 64, .dtype = DType::kI4};
  spec.layer_dtypes = {DType::kBF16, DType::kI4, DType::kI4};
  const KvSpec r = newest_blocks_spec(spec, DType::kBF16);
  EXPECT_EQ(r.dtype, DType::kBF16);
  EXPECT_TRUE(r.layer_dtypes.empty());
  EXPECT_EQ(r.num_layers, 3);
  EXPECT_EQ(r.num_kv_heads, 2);
  EXPECT_EQ(r.head_dim, 64);
  EXPECT_FALSE(needs_newest_blocks_group(r));
  // 3 layers x K and V x 2 heads x 16 tokens x 64 channels x 2 bytes.
  EXPECT_EQ(KvLayout(r, 16).block_bytes(), 3 * 2 * 2 * 16 * 64 * 2);
  EXPECT_EQ(KvLayout(newest_blocks_spec(spec), 16).block_bytes(),
            2 * KvLayout(r, 16).block_bytes());
}

TEST_F(ResidualPoolTest, TheLayoutBuilderEmitsEachSequencesNewestBlocksLayoutAndSlots) {
  KvCacheManager m = make(/*r=*/2, /*residual_num_blocks=*/12, /*num_blocks=*/12);
  BlockTable a(kBs);
  BlockTable b(kBs);
  ASSERT_TRUE(m.allocate_slots(a, 10));  // main 1 2 3, residual 1 2 3
  ASSERT_TRUE(m.allocate_slots(b, 3));   // main 4, residual 4
  m.free_unneeded_blocks(a, 10);         // a keeps residual 2 3 (blocks 1, 2)
  ASSERT_TRUE(m.allocate_slots(a, 1));   // position 10
  PagedLayoutBuilder builder(kBs, {KvGroupSpec{}, KvGroupSpec::newest(2, {})});
  builder.add_sequence(a, 11, 1);
  builder.add_sequence(b, 3, 3);
  EXPECT_EQ(builder.group(1).indptr, (V{0, 2, 3}));
  EXPECT_EQ(builder.group(1).indices, (V{2, 3, 4}));
  EXPECT_EQ(builder.group(1).first_block, (V{1, 0}));
  EXPECT_EQ(builder.group(1).slot_mapping,
            (std::vector<int64_t>{3 * kBs + 2, 4 * kBs, 4 * kBs + 1, 4 * kBs + 2}));
  EXPECT_EQ(builder.slot_mapping(),
            (std::vector<int64_t>{3 * kBs + 2, 4 * kBs, 4 * kBs + 1, 4 * kBs + 2}));
  // The newest-blocks group's layout indexes by logical block from each sequence's first entry;
  // group 0's starts every sequence at block 0.
  const PagedKvLayout l = builder.layout(1);
  EXPECT_EQ(l.first(0), 1);
  EXPECT_EQ(l.block_at(0, 2), 3);
  EXPECT_EQ(l.block_at(1, 0), 4);
  EXPECT_EQ(l.kv_len(0), 11);
  EXPECT_EQ(builder.layout(0).first_block, nullptr);
  EXPECT_EQ(builder.layout(0).kv_len(0), 11);
  // Without the group the builder emits one layout.
  PagedLayoutBuilder plain(kBs);
  plain.add_sequence(a, 11, 1);
  EXPECT_EQ(plain.num_groups(), 1);
  EXPECT_EQ(plain.layout().first_block, nullptr);
  builder.clear();
  EXPECT_EQ(builder.group(1).indptr, (V{0}));
  EXPECT_TRUE(builder.group(1).slot_mapping.empty());
  m.free(a);
  m.free(b);
}

}  // namespace
}  // namespace strata::kv

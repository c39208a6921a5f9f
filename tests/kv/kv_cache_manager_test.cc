// KvCacheManager: longest cached prefix with exact block ids, the last token always left to
// compute, tail-first freeing (the eviction order), transactional admission with a hit, tenant
// isolation by salt, fork and copy-on-write, counters and events; invariants after every call.

#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::PoolSnapshot;
using test_util::values;
using V = std::vector<int32_t>;

constexpr int32_t kBs = 4;

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

class KvCacheManagerTest : public ::testing::Test {
 protected:
  explicit KvCacheManagerTest(int32_t num_blocks = 9, int32_t hash_bits = 256)
      : m_(KvCacheConfig{.block_size = kBs,
                         .hash_bits = hash_bits,
                         .event_sink = &events_,
                         .groups = {{KvGroupSpec{}, num_blocks}}}) {}

  // Admits a prompt the way a scheduler does: lookup, allocate the rest, "compute" it, register.
  BlockTable admit(const std::vector<int32_t>& prompt, const BlockExtraKeys& extra = {}) {
    BlockTable t(kBs);
    const PrefixHit hit = m_.find_cached_prefix(prompt, extra);
    const int32_t n = static_cast<int32_t>(prompt.size()) - hit.num_tokens;
    EXPECT_TRUE(m_.allocate_slots(t, n, &hit));
    m_.pool().check_invariants();
    m_.cache_full_blocks(t, prompt, static_cast<int32_t>(prompt.size()), extra);
    m_.pool().check_invariants();
    last_hit_tokens_ = hit.num_tokens;
    return t;
  }

  RecordingKvEventSink events_;
  KvCacheManager m_;
  int32_t last_hit_tokens_ = 0;
};

TEST_F(KvCacheManagerTest, SecondRequestReusesTheLongestCachedPrefix) {
  const std::vector<int32_t> prompt = iota_tokens(10);  // blocks 1, 2 full; 3 holds 2 tokens
  BlockTable a = admit(prompt);
  EXPECT_EQ(values(a.blocks()), (V{1, 2, 3}));
  EXPECT_EQ(last_hit_tokens_, 0);
  EXPECT_EQ(m_.pool().num_cached_blocks(), 2) << "only full blocks are cached";
  m_.free(a);
  m_.pool().check_invariants();
  EXPECT_EQ(values(m_.pool().free_queue()), (V{4, 5, 6, 7, 8, 3, 2, 1})) << "tail freed first";

  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {7, 7, 7, 7, 7});  // shares 10 tokens, 2 full blocks
  BlockTable b = admit(longer);
  EXPECT_EQ(last_hit_tokens_, 8);
  EXPECT_EQ(values(b.blocks()), (V{1, 2, 4, 5})) << "hit blocks, then new ones from the front";
  EXPECT_EQ(b.num_tokens(), 15);
  EXPECT_EQ(values(m_.pool().free_queue()), (V{6, 7, 8, 3}));
  const PrefixCacheStats s = m_.stats();
  EXPECT_EQ(s.num_queries, 2);
  EXPECT_EQ(s.num_query_tokens, 25);
  EXPECT_EQ(s.num_hit_tokens, 8);
  EXPECT_EQ(s.num_cached_blocks, 3);
  m_.free(b);
}

TEST_F(KvCacheManagerTest, AFullyCachedPromptStillComputesItsLastToken) {
  const std::vector<int32_t> prompt = iota_tokens(8);  // exactly 2 blocks
  BlockTable a = admit(prompt);
  m_.free(a);
  BlockTable b = admit(prompt);
  EXPECT_EQ(last_hit_tokens_, 4) << "7 tokens may come from the cache: one whole block";
  EXPECT_EQ(values(b.blocks()).front(), 1);
  m_.free(b);
}

TEST_F(KvCacheManagerTest, SharedHitBlocksAreNotFreedWhileInUse) {
  BlockTable a = admit(iota_tokens(9));
  BlockTable b = admit(iota_tokens(9));
  EXPECT_EQ(last_hit_tokens_, 8);
  EXPECT_EQ(m_.pool().ref_count(BlockId{1}), 2);
  EXPECT_EQ(m_.pool().ref_count(BlockId{2}), 2);
  m_.free(a);
  m_.pool().check_invariants();
  EXPECT_EQ(m_.pool().ref_count(BlockId{1}), 1);
  EXPECT_EQ(values(m_.pool().free_queue()), (V{5, 6, 7, 8, 3}));
  m_.free(b);
  EXPECT_EQ(m_.pool().num_used_blocks(), 0);
}

TEST_F(KvCacheManagerTest, DifferentSaltsNeverShare) {
  BlockTable a = admit(iota_tokens(9), {"tenant-a", 0});
  m_.free(a);
  BlockTable b = admit(iota_tokens(9), {"tenant-b", 0});
  EXPECT_EQ(last_hit_tokens_, 0);
  m_.free(b);
  BlockTable c = admit(iota_tokens(9), {"tenant-a", 0});
  EXPECT_EQ(last_hit_tokens_, 8);
  m_.free(c);
  BlockTable d = admit(iota_tokens(9), {"tenant-a", 2});
  EXPECT_EQ(last_hit_tokens_, 0) << "another adapter";
  m_.free(d);
  m_.pool().check_invariants();
  EXPECT_EQ(m_.pool().num_used_blocks(), 0);
}

TEST_F(KvCacheManagerTest, AdmissionIsSideEffectFreeAndAFailedOneChangesNothing) {
  BlockTable a = admit(iota_tokens(8));  // blocks 1, 2 cached
  m_.free(a);
  BlockTable filler(kBs);
  ASSERT_TRUE(m_.allocate_slots(filler, 5 * kBs));  // 3..7 (never cached), leaves 8, 2, 1
  std::vector<int32_t> prompt = iota_tokens(8);
  prompt.insert(prompt.end(), 8, 5);  // 16 tokens: hit 1 block... no, 2 blocks (15 lookable)
  const PrefixHit hit = m_.find_cached_prefix(prompt, {});
  ASSERT_EQ(values(hit.blocks()), (V{1, 2}));
  BlockTable b(kBs);
  // Needs the 2 free hit blocks + 2 new blocks: 4 > 3 free.
  EXPECT_EQ(m_.num_blocks_to_allocate(b, 8, &hit), 4);
  const PoolSnapshot before(m_.pool());
  EXPECT_FALSE(m_.can_allocate(b, 8, &hit));
  EXPECT_EQ(PoolSnapshot(m_.pool()), before);
  EXPECT_FALSE(m_.allocate_slots(b, 8, &hit));
  m_.pool().check_invariants();
  EXPECT_EQ(PoolSnapshot(m_.pool()), before) << "a failed admission leaves the pool as it was";
  EXPECT_EQ(b.num_tokens(), 0);
  EXPECT_TRUE(b.blocks().empty());
  // With one block fewer it fits exactly.
  EXPECT_TRUE(m_.allocate_slots(b, 4, &hit));
  EXPECT_EQ(values(b.blocks()), (V{1, 2, 8}));
  EXPECT_EQ(m_.pool().num_free_blocks(), 0);
  m_.free(b);
  m_.free(filler);
  m_.pool().check_invariants();
}

TEST_F(KvCacheManagerTest, ForkSharesAndTheFirstWriteCopiesAPartlyFilledBlock) {
  BlockTable parent = admit(iota_tokens(6));  // block 1 full, block 2 holds 2 tokens
  BlockTable child(kBs);
  m_.fork(parent, child);
  m_.pool().check_invariants();
  EXPECT_EQ(values(child.blocks()), (V{1, 2}));
  EXPECT_EQ(m_.pool().ref_count(BlockId{2}), 2);
  EXPECT_EQ(m_.num_blocks_to_allocate(child, 1), 1) << "the copy";

  ASSERT_TRUE(m_.allocate_slots(child, 1));
  m_.pool().check_invariants();
  EXPECT_EQ(values(child.blocks()), (V{1, 3}));
  EXPECT_EQ(m_.take_pending_copies(), (std::vector<BlockCopy>{{BlockId{2}, BlockId{3}}}));
  EXPECT_TRUE(m_.take_pending_copies().empty());
  EXPECT_EQ(m_.pool().ref_count(BlockId{2}), 1);
  EXPECT_EQ(m_.pool().ref_count(BlockId{1}), 2) << "full blocks stay shared";

  ASSERT_TRUE(m_.allocate_slots(parent, 1));  // the parent owns block 2 alone now: no copy
  EXPECT_TRUE(m_.take_pending_copies().empty());
  EXPECT_EQ(values(parent.blocks()), (V{1, 2}));
  m_.free(child);
  m_.free(parent);
  m_.pool().check_invariants();
  EXPECT_EQ(m_.pool().num_used_blocks(), 0);
}

TEST_F(KvCacheManagerTest, ForkAtABlockBoundaryNeedsNoCopy) {
  BlockTable parent = admit(iota_tokens(8));
  BlockTable child(kBs);
  m_.fork(parent, child);
  ASSERT_TRUE(m_.allocate_slots(child, 1));
  EXPECT_TRUE(m_.take_pending_copies().empty());
  EXPECT_EQ(values(child.blocks()), (V{1, 2, 3}));
  m_.free(parent);
  m_.free(child);
  EXPECT_EQ(m_.pool().num_used_blocks(), 0);
}

TEST_F(KvCacheManagerTest, FailedCopyOnWriteChangesNothing) {
  BlockTable parent = admit(iota_tokens(6));
  BlockTable child(kBs);
  m_.fork(parent, child);
  BlockTable filler(kBs);
  ASSERT_TRUE(m_.allocate_slots(filler, m_.pool().num_free_blocks() * kBs));
  const PoolSnapshot before(m_.pool());
  EXPECT_FALSE(m_.allocate_slots(child, 1));
  EXPECT_EQ(PoolSnapshot(m_.pool()), before);
  EXPECT_EQ(values(child.blocks()), (V{1, 2}));
  EXPECT_TRUE(m_.take_pending_copies().empty());
  for (BlockTable* t : {&parent, &child, &filler}) m_.free(*t);
  EXPECT_EQ(m_.pool().num_used_blocks(), 0);
}

TEST_F(KvCacheManagerTest, EventsDescribeTheChain) {
  BlockTable a = admit(iota_tokens(9));
  ASSERT_EQ(events_.stored.size(), 2u);
  EXPECT_FALSE(events_.stored[0].parent_hash.has_value());
  EXPECT_EQ(events_.stored[0].block_id, BlockId{1});
  EXPECT_EQ(static_cast<int32_t>(events_.stored[0].token_ids.size()), kBs);
  ASSERT_TRUE(events_.stored[1].parent_hash.has_value());
  EXPECT_EQ(*events_.stored[1].parent_hash, events_.stored[0].hash);
  EXPECT_EQ(a.block_hashes()[1], events_.stored[1].hash);
  m_.free(a);
  BlockTable filler(kBs);
  ASSERT_TRUE(m_.allocate_slots(filler, 8 * kBs));  // every block: evicts 2 then 1
  ASSERT_EQ(events_.removed.size(), 2u);
  EXPECT_EQ(events_.removed[0].block_id, BlockId{2});
  EXPECT_EQ(events_.removed[1].block_id, BlockId{1});
  EXPECT_EQ(m_.stats().num_evictions, 2);
  m_.free(filler);
}

TEST(KvCacheManagerOffTest, NoCachingMeansNoHitsAndNoCachedBlocks) {
  KvCacheManager m(
      KvCacheConfig{.block_size = kBs, .enable_prefix_caching = false, .groups = {{KvGroupSpec{}, 5}}});
  BlockTable a(kBs);
  const std::vector<int32_t> prompt = iota_tokens(9);
  EXPECT_TRUE(m.find_cached_prefix(prompt, {}).blocks().empty());
  ASSERT_TRUE(m.allocate_slots(a, 9));
  m.cache_full_blocks(a, prompt, 9, {});
  EXPECT_EQ(m.pool().num_cached_blocks(), 0);
  m.free(a);
  m.pool().check_invariants();
}

// The weakened 8-bit hash makes collisions common; identical blocks under different parents and
// under different salts must still never be served to the wrong prompt.
class WeakHashTest : public KvCacheManagerTest {
 protected:
  WeakHashTest() : KvCacheManagerTest(/*num_blocks=*/400, /*hash_bits=*/8) {}
};

TEST_F(WeakHashTest, IdenticalBlocksUnderOtherParentsOrSaltsNeverHit) {
  const std::vector<int32_t> shared_block = {42, 42, 42, 42};
  std::vector<BlockTable> held;
  // 120 prompts: a distinct first block, then the same second block, under 3 salts.
  for (int32_t i = 0; i < 120; ++i) {
    std::vector<int32_t> prompt = {i, i, i, i};
    prompt.insert(prompt.end(), shared_block.begin(), shared_block.end());
    prompt.push_back(1);
    held.push_back(admit(prompt, {"salt" + std::to_string(i % 3), 0}));
    ASSERT_EQ(last_hit_tokens_, 0) << "prompt " << i << " is new";
  }
  EXPECT_EQ(m_.pool().num_cached_blocks(), 240);
  // Same second block, unseen first blocks or unseen salt/first-block pairs: zero hits.
  for (int32_t i = 0; i < 120; ++i) {
    std::vector<int32_t> prompt = {i + 1000, i, i, i};
    prompt.insert(prompt.end(), shared_block.begin(), shared_block.end());
    prompt.push_back(1);
    EXPECT_EQ(m_.find_cached_prefix(prompt, {"salt" + std::to_string(i % 3), 0}).num_tokens, 0);
    prompt[0] = i;
    EXPECT_EQ(m_.find_cached_prefix(prompt, {"salt" + std::to_string((i + 1) % 3), 0}).num_tokens,
              0)
        << "another tenant's prefix";
    const PrefixHit hit = m_.find_cached_prefix(prompt, {"salt" + std::to_string(i % 3), 0});
    ASSERT_EQ(hit.num_tokens, 8) << "its own prefix hits in full";
    EXPECT_EQ(std::vector<BlockId>(hit.blocks().begin(), hit.blocks().end()), std::vector<BlockId>(held[static_cast<size_t>(i)].blocks().begin(),
                                               held[static_cast<size_t>(i)].blocks().begin() + 2));
  }
  for (BlockTable& t : held) m_.free(t);
  m_.pool().check_invariants();
  EXPECT_EQ(m_.pool().num_used_blocks(), 0);
}

}  // namespace
}  // namespace strata::kv

// KV tiers under a cache of two groups (docs/kv.md, "KV tiers", "Several groups"): group 0 full
// attention, group 1 the newest two blocks at full precision (INT4's; a hit reads one block of
// it before its first computed position). Each group's evicted blocks go to its own host tier,
// and a promotion brings group 0's chain up and then the copy of group 1 the hit needs, each
// byte for byte; a group-1 block that fails its checksum cuts the hit back a block (to where the
// tier has a good copy) and is counted; with nothing of group 1 left anywhere there is no hit.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "kv/kv_tiers.h"
#include "tests/kv/kv_tiers_fixture.h"

namespace strata::kv {
namespace {

class KvTiersTwoGroupsTest : public ::testing::Test {
 protected:
  static constexpr int32_t kPoolBlocks = 9;    // group 0: 8 usable
  static constexpr int32_t kNewestBlocks = 8;  // group 1: 7 usable (a prompt's prefill takes 6)
  static constexpr int32_t kR = 2;

  void SetUp() override {
    cache_ = std::make_unique<KvCacheManager>(
        KvCacheConfig{.block_size = kBs,
                      .groups = {{KvGroupSpec::full(small_spec()), kPoolBlocks},
                                 {KvGroupSpec::newest(kR, small_spec()), kNewestBlocks}}});
    pools_[0] = std::make_unique<HostKvBuffer>(small_layout(), kPoolBlocks);
    pools_[1] = std::make_unique<HostKvBuffer>(small_layout(), kNewestBlocks);
    movers_[0] = std::make_unique<HostBlockMover>(*pools_[0]);
    movers_[1] = std::make_unique<HostBlockMover>(*pools_[1]);
    KvTierConfig c;
    // 4x the pools: the shares (9 : 8) give each group's tier four times its pool.
    c.host_bytes = 4 * (kPoolBlocks + kNewestBlocks) * small_layout().block_bytes();
    c.ns = 7;
    BlockMover* const movers[] = {movers_[0].get(), movers_[1].get()};
    Result<std::unique_ptr<KvTiers>> t = KvTiers::create(c, *cache_, movers);
    ASSERT_TRUE(t.ok()) << t.status().message();
    tiers_ = std::move(t).value();
  }

  std::vector<int32_t> prompt(int32_t first_token, int32_t num_blocks) {
    std::vector<int32_t> p(static_cast<size_t>(num_blocks * kBs + 1));
    std::iota(p.begin(), p.end(), first_token);
    return p;
  }
  std::span<std::byte> bytes(int32_t g, BlockId b) {
    const int64_t n = small_layout().block_bytes();
    return {pools_[static_cast<size_t>(g)]->data() + b.value * n, static_cast<size_t>(n)};
  }
  // Group g's bytes of the block starting at token `token`.
  static std::vector<std::byte> want(int32_t g, int32_t token) {
    std::vector<std::byte> v(static_cast<size_t>(small_layout().block_bytes()));
    fill(v, static_cast<uint32_t>(token + 1000 * g));
    return v;
  }
  // p's K/V computed in both groups (each block a function of its first token and group), cached,
  // the table freed.
  void compute(const std::vector<int32_t>& p) {
    BlockTable t(kBs);
    ASSERT_TRUE(cache_->allocate_slots(t, static_cast<int32_t>(p.size())));
    for (int32_t g = 0; g < 2; ++g) {
      const std::span<const BlockId> row = t.blocks(g);
      for (int32_t b = 0; b < static_cast<int32_t>(p.size()) / kBs; ++b) {
        const BlockId id = row[static_cast<size_t>(b)];
        if (id == kNullBlock) continue;
        const std::vector<std::byte> w = want(g, p[static_cast<size_t>(b * kBs)]);
        std::copy(w.begin(), w.end(), bytes(g, id).begin());
      }
    }
    cache_->cache_full_blocks(t, p, static_cast<int32_t>(p.size()), {});
    cache_->free(t);
  }
  // Every cached block of both groups evicted (their bytes then overwritten).
  void evict_everything() {
    for (int32_t g = 0; g < 2; ++g) {
      BlockPool& pool = cache_->pool(g);
      std::optional<std::vector<BlockId>> all = pool.allocate(pool.num_free_blocks());
      ASSERT_TRUE(all.has_value());
      for (const BlockId b : *all) std::fill(bytes(g, b).begin(), bytes(g, b).end(), std::byte{0});
      pool.free(*all);
    }
  }
  // The hit after the tiers' promotion; it must equal a fresh lookup's.
  PrefixHit promote(const std::vector<int32_t>& p) {
    PrefixHit hit = cache_->find_cached_prefix(p, {});
    tiers_->promote(p, {}, hit);
    const PrefixHit fresh = cache_->find_cached_prefix(p, {});
    EXPECT_EQ(hit.num_tokens, fresh.num_tokens);
    EXPECT_EQ(hit.rows, fresh.rows);
    return hit;
  }
  void expect_bytes(const std::vector<int32_t>& p, const PrefixHit& hit) {
    for (int32_t g = 0; g < 2; ++g) {
      const std::span<const BlockId> row = hit.blocks(g);
      for (size_t b = 0; b < row.size(); ++b) {
        if (row[b] == kNullBlock) continue;
        const std::vector<std::byte> w = want(g, p[b * kBs]);
        const std::span<std::byte> got = bytes(g, row[b]);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), w.begin())) << "group " << g << " block " << b;
      }
    }
  }

  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<HostKvBuffer> pools_[2];
  std::unique_ptr<BlockMover> movers_[2];
  std::unique_ptr<KvTiers> tiers_;
};

TEST_F(KvTiersTwoGroupsTest, BothGroupsComeBackByteForByte) {
  const std::vector<int32_t> p = prompt(10, 5);
  compute(p);
  evict_everything();
  ASSERT_EQ(cache_->find_cached_prefix(p, {}).num_tokens, 0);
  ASSERT_NE(tiers_->host(1), nullptr);
  EXPECT_GT(tiers_->host(1)->num_blocks(), 0) << "group 1's evicted copies went to its own tier";
  const PrefixHit hit = promote(p);
  ASSERT_EQ(hit.num_tokens, 5 * kBs);
  // Group 1: the block before the first computed position, and only it.
  EXPECT_EQ(std::count_if(hit.rows[1].begin(), hit.rows[1].end(),
                          [](BlockId b) { return b != kNullBlock; }),
            kR - 1);
  EXPECT_NE(hit.rows[1][4], kNullBlock);
  expect_bytes(p, hit);
  EXPECT_EQ(tiers_->stats().num_host_hit_blocks, 5);
  EXPECT_EQ(tiers_->stats().num_faults, 0);
  cache_->check_invariants();
}

// Group 0's blocks evicted and brought back from its tier into other blocks, while group 1's pool
// kept its copies: the copies are found by their hash and linked to the new blocks, with no copy
// read from group 1's tier.
TEST_F(KvTiersTwoGroupsTest, CopiesTheGroupsPoolKeptAreLinkedToBlocksThatCameBack) {
  const std::vector<int32_t> p = prompt(10, 5);
  compute(p);
  BlockPool& pool = cache_->pool(0);
  std::optional<std::vector<BlockId>> all = pool.allocate(pool.num_free_blocks());
  ASSERT_TRUE(all.has_value());
  pool.free(*all);
  ASSERT_EQ(cache_->find_cached_prefix(p, {}).num_tokens, 0);
  const int64_t offloaded = tiers_->stats().num_offloaded_blocks;
  const PrefixHit hit = promote(p);
  ASSERT_EQ(hit.num_tokens, 5 * kBs);
  expect_bytes(p, hit);
  EXPECT_EQ(tiers_->host(1)->num_blocks(), 0) << "nothing of group 1 went down or came up";
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, offloaded);
  cache_->check_invariants();
}

TEST_F(KvTiersTwoGroupsTest, ACorruptCopyCutsTheHitToWhereTheTierHasAGoodOne) {
  const std::vector<int32_t> p = prompt(10, 5);
  compute(p);
  evict_everything();
  // Group 1's copy of the last full block, one byte flipped in its host slot.
  HostTier& host = const_cast<HostTier&>(*tiers_->host(1));
  bool flipped = false;
  for (int32_t s = 0; s < host.capacity() && !flipped; ++s) {
    const BlockId slot{s};
    if (!host.committed(slot) || host.tokens(slot).empty() || host.tokens(slot)[0] != p[4 * kBs]) {
      continue;
    }
    host.bytes(slot)[0] ^= std::byte{0x5a};
    flipped = true;
  }
  ASSERT_TRUE(flipped);
  const PrefixHit hit = promote(p);
  EXPECT_EQ(hit.num_tokens, 4 * kBs) << "cut to the block before the corrupt one";
  expect_bytes(p, hit);
  EXPECT_EQ(tiers_->stats().num_faults, 1);
  cache_->check_invariants();
}

TEST_F(KvTiersTwoGroupsTest, WithoutGroupOnesCopiesThereIsNoHit) {
  const std::vector<int32_t> p = prompt(10, 5);
  compute(p);
  evict_everything();
  HostTier& host = const_cast<HostTier&>(*tiers_->host(1));
  for (int32_t s = 0; s < host.capacity(); ++s) {
    if (host.committed(BlockId{s})) host.erase(BlockId{s});
  }
  const PrefixHit hit = promote(p);
  EXPECT_EQ(hit.num_tokens, 0);
  cache_->check_invariants();
}

}  // namespace
}  // namespace strata::kv

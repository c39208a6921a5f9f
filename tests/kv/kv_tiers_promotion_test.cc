// A promotion left running (KvTiers::promote_async, docs/kv.md "KV tiers"): its copies up go on
// while the caller does other work (a GPU's copy stream; DeferredMover holds them), its blocks are
// held but not in the prefix cache until it is finished, and they arrive byte for byte; a host
// block whose bytes changed ends the promotion there; a chain longer than the host tier can pin
// goes up stage by stage with only the last left running; a cancelled promotion, or one overtaken
// by another request's, gives every pool block back and leaves the host tier whole.

#include <gtest/gtest.h>

#include <vector>

#include "tests/kv/kv_tiers_fixture.h"

namespace strata::kv {
namespace {

class KvTiersPromotionTest : public KvTiersTest {
 protected:
  void SetUp() override {
    start(/*host_blocks=*/4, /*with_disk=*/false, /*ns=*/42, OffloadPolicy::kEvict,
          /*deferred=*/true);
  }
  // p computed, then evicted to the host tier.
  void in_host_tier(const std::vector<int32_t>& p) {
    compute(p);
    evict_everything();
    ASSERT_EQ(cache_->find_cached_prefix(p, {}).num_tokens, 0);
  }
  int32_t free_blocks() const { return cache_->pool().num_free_blocks(); }
};

TEST_F(KvTiersPromotionTest, ItsBlocksArriveWhenTheCopiesFinishNotBefore) {
  const std::vector<int32_t> p = prompt(100, 3);
  in_host_tier(p);
  const int owner = 0;
  PrefixHit hit = cache_->find_cached_prefix(p, {});
  KvTiers::Progress up = tiers_->promote_async(&owner, p, {}, hit);
  EXPECT_TRUE(up.pending);
  EXPECT_EQ(up.promoted.host_blocks, 0);
  EXPECT_EQ(hit.num_tokens, 0) << "not extended while the copies run";
  EXPECT_EQ(deferred_->num_in_flight(), 1);
  EXPECT_EQ(free_blocks(), 8 - 3) << "its pool blocks are held";
  EXPECT_EQ(cache_->find_cached_prefix(p, {}).num_tokens, 0) << "and not in the prefix cache yet";
  EXPECT_FALSE(tiers_->promotion_ready());
  // Asked again before the copies finish: still pending, nothing started twice.
  hit = cache_->find_cached_prefix(p, {});
  EXPECT_TRUE(tiers_->promote_async(&owner, p, {}, hit).pending);
  EXPECT_EQ(deferred_->num_in_flight(), 1);

  deferred_->complete();
  tiers_->wait_promotion();
  EXPECT_TRUE(tiers_->promotion_ready());
  hit = cache_->find_cached_prefix(p, {});
  up = tiers_->promote_async(&owner, p, {}, hit);
  EXPECT_FALSE(up.pending);
  EXPECT_EQ(up.promoted.host_blocks, 3);
  EXPECT_EQ(hit.num_tokens, 3 * kBs);
  EXPECT_FALSE(tiers_->promotion_under_way());
  expect_hit_bytes(p, 3);
  EXPECT_EQ(free_blocks(), 8) << "cached and free, as a computed prefix is";
  EXPECT_EQ(tiers_->host().num_pinned(), 0);
}

TEST_F(KvTiersPromotionTest, AHostBlockWhoseBytesChangedEndsThePromotionThere) {
  const std::vector<int32_t> p = prompt(100, 3);
  in_host_tier(p);
  // The host slot of the second block: its bytes changed after they were checksummed.
  HostTier& host = const_cast<HostTier&>(tiers_->host());
  bool changed = false;
  for (int32_t s = 0; s < host.capacity(); ++s) {
    const BlockId slot{s};
    if (host.tokens(slot).empty() || host.tokens(slot)[0] != p[kBs]) continue;
    host.bytes(slot)[3] ^= std::byte{0x40};
    changed = true;
  }
  ASSERT_TRUE(changed);
  const int owner = 0;
  PrefixHit hit = cache_->find_cached_prefix(p, {});
  ASSERT_TRUE(tiers_->promote_async(&owner, p, {}, hit).pending);
  deferred_->complete();
  tiers_->wait_promotion();
  hit = cache_->find_cached_prefix(p, {});
  const KvTiers::Progress up = tiers_->promote_async(&owner, p, {}, hit);
  EXPECT_FALSE(up.pending);
  EXPECT_EQ(up.promoted.host_blocks, 1) << "the first block only: the second failed its check";
  EXPECT_EQ(tiers_->stats().num_faults, 1);
  EXPECT_EQ(host.num_blocks(), 2) << "the changed block is dropped";
  expect_hit_bytes(p, 1);
  EXPECT_EQ(free_blocks(), 8);
}

TEST_F(KvTiersPromotionTest, AChainLongerThanTheHostTierLeavesOnlyItsLastStageRunning) {
  start(/*host_blocks=*/2, /*with_disk=*/true, /*ns=*/42, OffloadPolicy::kEvict,
        /*deferred=*/true);
  const std::vector<int32_t> p = prompt(100, 5);
  compute(p);
  evict_everything();  // 2 blocks stay in host memory, the others go to disk
  tiers_->drain_io();
  const int owner = 0;
  PrefixHit hit = cache_->find_cached_prefix(p, {});
  const KvTiers::Progress first = tiers_->promote_async(&owner, p, {}, hit);
  ASSERT_TRUE(first.pending);
  EXPECT_EQ(deferred_->num_in_flight(), 1) << "the stages before the last were waited for";
  const int32_t before = first.promoted.host_blocks + first.promoted.disk_blocks;
  EXPECT_GE(before, 2);
  EXPECT_EQ(hit.num_tokens, before * kBs) << "and are in the hit already";
  deferred_->complete();
  tiers_->wait_promotion();
  hit = cache_->find_cached_prefix(p, {});
  EXPECT_EQ(hit.num_tokens, before * kBs) << "held while the last stage copied";
  const KvTiers::Progress last = tiers_->promote_async(&owner, p, {}, hit);
  EXPECT_FALSE(last.pending);
  EXPECT_EQ(before + last.promoted.host_blocks + last.promoted.disk_blocks, 5);
  expect_hit_bytes(p, 5);
  EXPECT_EQ(free_blocks(), 8);
  tiers_->drain_io();  // a victim's write to disk may still hold its slot until it is applied
  EXPECT_EQ(tiers_->host().num_pinned(), 0);
}

TEST_F(KvTiersPromotionTest, ACancelledOrOvertakenPromotionGivesEveryBlockBack) {
  const std::vector<int32_t> p = prompt(100, 2);
  const std::vector<int32_t> q = prompt(500, 2);
  compute(p);
  compute(q);
  evict_everything();
  const int a = 0, b = 0;
  PrefixHit hit = cache_->find_cached_prefix(p, {});
  ASSERT_TRUE(tiers_->promote_async(&a, p, {}, hit).pending);
  EXPECT_EQ(free_blocks(), 8 - 2);
  // Another request's promotion ends a's first (a left the head of the queue).
  PrefixHit other = cache_->find_cached_prefix(q, {});
  ASSERT_TRUE(tiers_->promote_async(&b, q, {}, other).pending);
  EXPECT_EQ(free_blocks(), 8 - 2);
  EXPECT_EQ(cache_->find_cached_prefix(p, {}).num_tokens, 0) << "a's blocks went back uncached";
  tiers_->cancel_promotion(&a);  // not a's any more: nothing happens
  EXPECT_TRUE(tiers_->promotion_under_way());
  tiers_->cancel_promotion(&b);
  EXPECT_FALSE(tiers_->promotion_under_way());
  EXPECT_EQ(free_blocks(), 8);
  EXPECT_EQ(tiers_->host().num_blocks(), 4) << "the host tier keeps all four";
  EXPECT_EQ(tiers_->host().num_pinned(), 0);
  tiers_->host().check_invariants();
  // And serves them.
  EXPECT_EQ(promote(p).host_blocks, 2);
  expect_hit_bytes(p, 2);
}

}  // namespace
}  // namespace strata::kv

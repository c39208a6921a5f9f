// The KV tiers over a real redis-server the test starts: a host slot that the remote tier's writer
// still holds (put_borrowed, given back at the next poll) is found by a promotion that runs before
// that poll. Pins nest: the promotion copies the block up while the writer codes it, and the slot
// is free for another block only when both are done.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "kv/kv_events.h"
#include "kv/kv_tiers.h"
#include "kv/remote_tier.h"
#include "tests/kv/kv_tiers_fixture.h"
#include "tests/kv/redis_server.h"

namespace strata::kv {
namespace {

class KvTiersRemoteTest : public KvTiersTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.start()) << "redis-server did not start (install_deps.sh)";
    remote_ = RedisTarget{.nodes = {server_.endpoint()}, .cluster = false};
    start(/*host_blocks=*/4, /*with_disk=*/false);
  }
  void TearDown() override {
    KvTiersTest::TearDown();
    server_.stop();
  }

  // Waits (up to 10 s) until the remote tier has written n blocks in all.
  void wait_for_writes(int64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (tiers_->remote()->stats().num_writes < n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(tiers_->remote()->stats().num_writes, n);
  }
  // Computes the prompts, evicts them down to the host tier and waits until Redis holds them.
  void in_redis(const std::vector<std::vector<int32_t>>& prompts) {
    int64_t blocks = 0;
    for (const std::vector<int32_t>& p : prompts) {
      compute(p);
      blocks += static_cast<int64_t>(p.size()) / kBs;
    }
    evict_everything();
    tiers_->drain_io();
    wait_for_writes(blocks);
  }

  test_util::RedisServer server_;
};

// Evicted blocks go down to the host tier and are queued for Redis from their slots, which stay
// pinned until a poll takes the writer's releases; the lookup before that poll promotes them
// without waiting for the writer.
TEST_F(KvTiersRemoteTest, APromotionStagesHostSlotsTheWriterStillHolds) {
  const std::vector<int32_t> p = prompt(100, 3);
  compute(p);
  evict_everything();
  ASSERT_EQ(tiers_->stats().num_offloaded_blocks, 3);
  ASSERT_EQ(tiers_->host().num_pinned(), 3) << "the writer holds the slots until a poll";
  const KvTiers::Promoted up = promote(p);
  EXPECT_EQ(up.host_blocks, 3);
  expect_hit_bytes(p, 3);
  tiers_->drain_io();
  EXPECT_EQ(tiers_->host().num_pinned(), 0);
  tiers_->host().check_invariants();
  // The writer gave the slots back before its round trip: the writes land soon after, and the
  // blocks reach Redis.
  wait_for_writes(3);
}

// The tiers' KV events: blocks the pool evicts are reported stored on the host tier at once,
// and stored on the remote medium at the poll after Redis took them, under the pool's hashes.
TEST_F(KvTiersRemoteTest, TierEventsNameTheHostAndRemoteMedia) {
  RecordingKvEventSink events;
  cache_->pool().set_event_sink(&events);
  tiers_->set_event_sink(&events);
  const std::vector<int32_t> p = prompt(700, 3);
  compute(p);
  ASSERT_EQ(events.stored.size(), 3u);
  evict_everything();
  ASSERT_EQ(events.removed.size(), 3u);
  ASSERT_EQ(events.tier_stored.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(events.tier_stored[i].first, KvMedium::kHost);
    EXPECT_EQ(events.tier_stored[i].second, events.removed[i].hash);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (events.tier_stored.size() < 6 && std::chrono::steady_clock::now() < until) {
    tiers_->poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(events.tier_stored.size(), 6u) << "the writes reached Redis";
  std::vector<BlockHash> remote, pool;
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(events.tier_stored[i].first, KvMedium::kRemote);
    remote.push_back(events.tier_stored[i].second);
  }
  for (const BlockStoredEvent& e : events.stored) pool.push_back(e.hash);
  std::sort(remote.begin(), remote.end());
  std::sort(pool.begin(), pool.end());
  EXPECT_EQ(remote, pool);
  EXPECT_TRUE(events.tier_removed.empty()) << "a host tier of 4 blocks held all 3";
  tiers_->set_event_sink(nullptr);
  cache_->pool().set_event_sink(nullptr);
}

// Write-through: the blocks go down (and are queued for Redis) at a poll, the pool evicts them,
// and a lookup before the next poll promotes them from the slots the writer holds.
TEST_F(KvTiersRemoteTest, AWriteThroughBlockStillBeingWrittenIsPromoted) {
  start(/*host_blocks=*/4, /*with_disk=*/false, /*ns=*/42, OffloadPolicy::kWriteThrough);
  const std::vector<int32_t> p = prompt(300, 2);
  compute(p);
  tiers_->poll();
  ASSERT_EQ(tiers_->stats().num_offloaded_blocks, 2);
  evict_everything();
  EXPECT_EQ(promote(p).host_blocks, 2);
  expect_hit_bytes(p, 2);
  tiers_->drain_io();
  EXPECT_EQ(tiers_->host().num_pinned(), 0);
  tiers_->host().check_invariants();
}

// A second instance over the same Redis: once its host tier has churned (its blocks live
// milliseconds before they are taken for others) and a step is timed, a request with tokens
// ahead of it is not read for yet (the blocks would be gone before it is admitted); at the head
// of the queue it is.
TEST_F(KvTiersRemoteTest, AReadIsPutOffWhileItsBlocksWouldBeEvictedBeforeTheRequestComesUp) {
  const std::vector<int32_t> p = prompt(100, 2);
  const std::vector<int32_t> q = prompt(500, 1);
  in_redis({p, q});

  // Another instance, nothing in its host tier of 12 blocks (prefetches may hold 3): 18 blocks
  // go through it, so it takes its oldest for the last 6.
  start(/*host_blocks=*/12, /*with_disk=*/false);
  for (const int32_t first : {900, 2000, 3000}) {
    compute(prompt(first, 6));
    evict_everything();
  }
  tiers_->drain_io();
  tiers_->observe_step(10, 10.0);  // a second a token: anything ahead outlasts the tier
  PrefetchState first;  // no read timed yet: q is read
  tiers_->prefetch(q, {}, first);
  ASSERT_NE(first.ticket, nullptr);
  tiers_->drain_io();
  EXPECT_EQ(tiers_->stats().num_remote_fetched_blocks, 1);

  PrefetchState behind;
  behind.tokens_ahead = 1;
  tiers_->prefetch(p, {}, behind);
  EXPECT_EQ(behind.ticket, nullptr) << "put off";
  EXPECT_EQ(tiers_->stats().num_remote_skipped_blocks, 0) << "not skipped: read later";
  PrefetchState head;
  tiers_->prefetch(p, {}, head);
  ASSERT_NE(head.ticket, nullptr);
  tiers_->drain_io();
  EXPECT_EQ(tiers_->stats().num_remote_fetched_blocks, 3);
  tiers_->host().check_invariants();
}

// A block read from Redis for a request that still waits stays in the host tier, however many
// blocks go down meanwhile, until the request drops its ticket (admitted, gone, or on without
// the read); read for a request that has dropped it, the same churn pushes it out.
TEST_F(KvTiersRemoteTest, ABlockReadForAWaitingRequestIsHeldUntilTheRequestDropsIt) {
  const std::vector<int32_t> p = prompt(100, 2);
  const std::vector<int32_t> q = prompt(500, 1);
  in_redis({p, q});

  start(/*host_blocks=*/12, /*with_disk=*/false);  // another instance: prefetches may hold 3
  PrefetchState waiting, gone;
  tiers_->prefetch(p, {}, waiting);
  tiers_->prefetch(q, {}, gone);
  ASSERT_TRUE(waiting.pending());
  ASSERT_TRUE(gone.pending());
  tiers_->drain_io();
  ASSERT_EQ(tiers_->stats().num_remote_fetched_blocks, 3);
  EXPECT_EQ(tiers_->host().num_pinned(), 3) << "held for the two requests";
  gone = {};  // q's request is admitted, or leaves
  tiers_->poll();
  EXPECT_EQ(tiers_->host().num_pinned(), 2);
  for (const int32_t first : {900, 2000, 3000}) {  // 18 blocks through a tier of 12
    compute(prompt(first, 6));
    evict_everything();
    tiers_->poll();
  }
  tiers_->drain_io();
  EXPECT_EQ(promote(q).host_blocks, 0) << "pushed out";
  EXPECT_EQ(promote(p).host_blocks, 2) << "held";
  expect_hit_bytes(p, 2);
  EXPECT_EQ(tiers_->host().num_pinned(), 2);
  waiting = {};
  tiers_->poll();
  tiers_->drain_io();
  EXPECT_EQ(tiers_->host().num_pinned(), 0);
  tiers_->host().check_invariants();
}

}  // namespace
}  // namespace strata::kv

// The scheduler and a KV-tier prefetch (docs/kv.md, "KV tiers"): a waiting sequence whose
// prefix is still coming from disk (its ticket has reads pending) is not admitted, and it holds
// the sequences queued behind it -- admitting them would evict its pool-resident prefix -- while
// the running ones step on; once its reads are in, it and those behind it are admitted in order.
// The same for a prefix whose blocks are still copying up from the host tier into the pool (a
// promotion under way), and a queued sequence that leaves meanwhile gives its held blocks back.

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_tiers.h"
#include "tests/kv/deferred_mover.h"

namespace strata::engine {
namespace {

constexpr int32_t kBs = 16;

std::unique_ptr<Sequence> make_seq(uint64_t id, int32_t prompt_len) {
  auto s = std::make_unique<Sequence>(kBs, 1000);
  s->tokens.resize(static_cast<size_t>(prompt_len));
  std::iota(s->tokens.begin(), s->tokens.end(), static_cast<int32_t>(id * 100));
  s->num_prompt = prompt_len;
  s->request_id = id;
  s->arrival_order = id;
  return s;
}

bool scheduled(const SchedulerOutput& out, const Sequence* seq) {
  for (const ScheduledSeq& s : out.scheduled) {
    if (s.seq == seq) return true;
  }
  return false;
}

TEST(SchedulerPrefetchTest, APendingPrefetchHoldsTheQueueButNotTheRunning) {
  kv::KvCacheManager cache(kv::KvCacheConfig{
      .block_size = kBs, .groups = {{kv::KvGroupSpec::full(kv::KvSpec{1, 1, 8, DType::kF32}), 64}}});
  Scheduler sched(SchedulerConfig{.max_model_len = 512}, cache);
  const auto running = make_seq(1, 40);
  const auto a = make_seq(2, 40);
  const auto b = make_seq(3, 40);
  sched.add_waiting(running.get());
  SchedulerOutput out = sched.schedule(0.0);
  ASSERT_TRUE(scheduled(out, running.get()));
  running->num_computed = running->num_prompt;  // its prompt is in; it decodes from here
  running->tokens.push_back(7);

  sched.add_waiting(a.get());
  sched.add_waiting(b.get());
  a->prefetch.ticket = std::make_shared<kv::PrefetchTicket>();
  a->prefetch.ticket->pending = 2;
  a->prefetch.ticket->blocks = 2;
  out = sched.schedule(0.0);
  EXPECT_TRUE(scheduled(out, running.get())) << "the running sequence steps on";
  EXPECT_FALSE(scheduled(out, a.get())) << "its prefix is still coming";
  EXPECT_FALSE(scheduled(out, b.get())) << "queued behind it, it waits too";
  EXPECT_EQ(a->status, SeqStatus::kWaiting);
  EXPECT_EQ(b->status, SeqStatus::kWaiting);

  running->num_computed += 1;
  running->tokens.push_back(8);
  a->prefetch.ticket->pending = 0;  // its reads are in
  out = sched.schedule(0.0);
  EXPECT_TRUE(scheduled(out, a.get()));
  EXPECT_TRUE(scheduled(out, b.get()));
  EXPECT_EQ(a->status, SeqStatus::kRunning);
  EXPECT_EQ(a->prefetch.ticket, nullptr) << "an admitted sequence drops its prefetch state";
}

// A cache of 63 usable blocks over a host pool whose mover holds started copies, the KV tiers
// beneath with room for 16 blocks, and a scheduler over them.
struct TieredScheduler {
  static constexpr int32_t kPoolBlocks = 64;
  kv::KvSpec spec{1, 1, 8, DType::kF32};
  kv::KvCacheManager cache{kv::KvCacheConfig{
      .block_size = kBs, .groups = {{kv::KvGroupSpec::full(spec), kPoolBlocks}}}};
  kv::HostKvBuffer pool{kv::KvLayout(spec, kBs), kPoolBlocks};
  kv::DeferredMover mover{pool};
  std::unique_ptr<kv::KvTiers> tiers;
  Scheduler sched{SchedulerConfig{.max_model_len = 512}, cache};

  TieredScheduler() {
    kv::KvTierConfig c;
    c.host_bytes = 16 * kv::KvLayout(spec, kBs).block_bytes();
    tiers = std::move(kv::KvTiers::create(c, cache, mover)).value();
    sched.set_tiers(tiers.get());
  }
  // seq's prompt computed and cached, then evicted from the pool into the host tier.
  void in_host_tier(const Sequence& seq) {
    kv::BlockTable t(kBs);
    const auto n = static_cast<int32_t>(seq.tokens.size());
    ASSERT_TRUE(cache.allocate_slots(t, n));
    cache.cache_full_blocks(t, seq.tokens, n, {});
    cache.free(t);
    kv::BlockTable all(kBs);
    ASSERT_TRUE(cache.allocate_slots(all, (kPoolBlocks - 1) * kBs));
    cache.free(all);
    ASSERT_EQ(cache.find_cached_prefix(seq.tokens, {}).num_tokens, 0);
  }
};

TEST(SchedulerPrefetchTest, APromotionUnderWayHoldsTheQueueButNotTheRunning) {
  TieredScheduler t;
  const auto running = make_seq(1, 40);
  const auto a = make_seq(2, 40);  // two full blocks, in the host tier
  const auto b = make_seq(3, 40);
  t.in_host_tier(*a);
  t.sched.add_waiting(running.get());
  SchedulerOutput out = t.sched.schedule(0.0);
  ASSERT_TRUE(scheduled(out, running.get()));
  running->num_computed = running->num_prompt;
  running->tokens.push_back(7);

  t.sched.add_waiting(a.get());
  t.sched.add_waiting(b.get());
  out = t.sched.schedule(0.0);
  EXPECT_TRUE(scheduled(out, running.get())) << "the running sequence steps on";
  EXPECT_FALSE(scheduled(out, a.get())) << "its prefix is still copying up";
  EXPECT_FALSE(scheduled(out, b.get())) << "queued behind it, it waits too";
  EXPECT_TRUE(t.tiers->promotion_under_way());
  EXPECT_EQ(t.mover.num_in_flight(), 1);

  running->num_computed += 1;
  running->tokens.push_back(8);
  t.mover.complete();
  t.tiers->wait_promotion();
  out = t.sched.schedule(0.0);
  ASSERT_TRUE(scheduled(out, a.get()));
  EXPECT_TRUE(scheduled(out, b.get()));
  EXPECT_EQ(a->num_computed, 2 * kBs) << "admitted with its promoted prefix as the hit";
  EXPECT_EQ(a->num_host_tier_tokens, 2 * kBs);
  EXPECT_FALSE(t.tiers->promotion_under_way());
}

TEST(SchedulerPrefetchTest, ASequenceThatLeavesDuringItsPromotionGivesItsBlocksBack) {
  TieredScheduler t;
  const auto a = make_seq(2, 40);
  t.in_host_tier(*a);
  const int32_t free_before = t.cache.pool().num_free_blocks();
  t.sched.add_waiting(a.get());
  const SchedulerOutput out = t.sched.schedule(0.0);
  EXPECT_FALSE(scheduled(out, a.get()));
  ASSERT_TRUE(t.tiers->promotion_under_way());
  EXPECT_LT(t.cache.pool().num_free_blocks(), free_before);
  t.sched.finish(a.get(), /*cancelled=*/true);
  EXPECT_FALSE(t.tiers->promotion_under_way());
  EXPECT_EQ(t.cache.pool().num_free_blocks(), free_before);
  EXPECT_EQ(t.tiers->host().num_pinned(), 0);
}

}  // namespace
}  // namespace strata::engine

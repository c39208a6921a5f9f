// The scheduler and a KV-tier prefetch (docs/kv.md, "KV tiers"): a waiting sequence whose
// prefix is still coming from disk (its ticket has reads pending) is not admitted, and it holds
// the sequences queued behind it -- admitting them would evict its pool-resident prefix -- while
// the running ones step on; once its reads are in, it and those behind it are admitted in order.

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kv/kv_cache_manager.h"

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

}  // namespace
}  // namespace strata::engine

// RemoteFetcher against a real redis-server started by the test: a job's blocks come back byte
// for byte in the buffers it was given (a host tier's slots), a block Redis lacks is NotFound,
// and the read's time and size ride on the job; a request that needs a block another's job is
// reading joins that job (pending until it is taken) instead of asking again; the tickets come
// back with the job, and the fetcher is idle once everything is taken.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "kv/block_hash.h"
#include "kv/remote_fetcher.h"
#include "kv/remote_tier.h"
#include "kv/tier_key.h"
#include "tests/kv/redis_server.h"
#include "tests/kv/remote_test_blocks.h"

namespace strata::kv {
namespace {

using namespace std::chrono_literals;

constexpr int32_t kBs = 4;
constexpr int64_t kBlockBytes = 128;
constexpr uint64_t kNs = 5;

struct Block {
  TierKey key;
  test_util::RemoteTestBlock b;
};

Block block(int32_t seed) {
  Block out{{}, test_util::remote_test_block(seed, kBs, kBlockBytes)};
  out.key = TierKey{kNs, out.b.hash};
  return out;
}

// A tier over a fresh server; the server stops with the fixture.
class RemoteFetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.start()) << "redis-server did not start (install_deps.sh)";
  }
  std::unique_ptr<RemoteTier> tier(std::chrono::milliseconds timeout) {
    RemoteTierOptions o;
    o.client.timeout = timeout;
    return std::make_unique<RemoteTier>(server_.endpoint(), kNs, kBs, kBlockBytes, o);
  }
  test_util::RedisServer server_;
};

TEST_F(RemoteFetcherTest, JobsComeBackWithTheirBlocksAndAJoinerWaitsOnTheReader) {
  const std::unique_ptr<RemoteTier> remote = tier(500ms);
  RemoteTier& tier = *remote;
  std::vector<Block> blocks;
  blocks.reserve(4);
  for (int32_t i = 0; i < 4; ++i) blocks.push_back(block(i));
  for (int32_t i = 0; i < 3; ++i) {  // the last one is never written
    const test_util::RemoteTestBlock& b = blocks[static_cast<size_t>(i)].b;
    ASSERT_TRUE(tier.put(b.hash, b.tokens, b.bytes, b.checksum));
  }
  tier.flush();

  RemoteFetcher fetcher(tier);
  EXPECT_TRUE(fetcher.idle());
  auto first = std::make_shared<PrefetchTicket>();
  auto second = std::make_shared<PrefetchTicket>();
  std::vector<std::vector<std::byte>> out(blocks.size(), std::vector<std::byte>(kBlockBytes));
  std::vector<RemoteFetcher::Block> reads;
  reads.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    reads.push_back({blocks[i].key, BlockId{static_cast<int32_t>(i)}, blocks[i].b.tokens, out[i]});
  }
  fetcher.submit(first, reads);
  EXPECT_EQ(first->pending, 1);
  EXPECT_EQ(first->blocks, 4);
  EXPECT_EQ(fetcher.blocks_in_flight(), 4);
  // The second request needs blocks 1 and 2: both are in the first's job, which it joins once.
  EXPECT_TRUE(fetcher.join(blocks[1].key, second));
  EXPECT_TRUE(fetcher.join(blocks[2].key, second));
  EXPECT_EQ(second->pending, 1);
  EXPECT_FALSE(fetcher.join(block(9).key, second));

  std::vector<std::unique_ptr<RemoteFetcher::Job>> done;
  while (done.empty()) done = fetcher.take_done(/*wait=*/true);
  ASSERT_EQ(done.size(), 1u);
  const RemoteFetcher::Job& job = *done[0];
  ASSERT_EQ(job.tickets.size(), 2u);
  EXPECT_EQ(job.tickets[0], first);
  EXPECT_EQ(job.tickets[1], second);
  ASSERT_EQ(job.gets.size(), 4u);
  EXPECT_EQ(job.read_blocks, 4);
  EXPECT_GT(job.read_seconds, 0.0);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(job.gets[i].status.ok()) << i << ": " << job.gets[i].status.to_string();
    EXPECT_EQ(out[i], blocks[i].b.bytes) << i;
    EXPECT_EQ(job.gets[i].checksum, blocks[i].b.checksum);
    EXPECT_EQ(job.blocks[i].key, blocks[i].key);
    EXPECT_EQ(job.blocks[i].slot, BlockId{static_cast<int32_t>(i)});
  }
  EXPECT_EQ(job.gets[3].status.code(), StatusCode::kNotFound);
  // Taken: nothing is in flight, and the blocks are no longer joinable.
  EXPECT_TRUE(fetcher.idle());
  EXPECT_EQ(fetcher.blocks_in_flight(), 0);
  EXPECT_FALSE(fetcher.join(blocks[1].key, second));
  EXPECT_TRUE(fetcher.take_done(/*wait=*/true).empty());  // none in flight: returns at once
}

TEST_F(RemoteFetcherTest, ADeadServerAnswersEveryJobUnavailableAndTheFetcherStopsCleanly) {
  const std::unique_ptr<RemoteTier> remote = tier(100ms);
  RemoteTier& tier = *remote;
  server_.stop();
  auto fetcher = std::make_unique<RemoteFetcher>(tier);
  const Block b = block(1);
  std::vector<std::byte> out(kBlockBytes);
  const std::vector<RemoteFetcher::Block> reads = {{b.key, BlockId{0}, b.b.tokens, out}};
  auto ticket = std::make_shared<PrefetchTicket>();
  fetcher->submit(ticket, reads);
  std::vector<std::unique_ptr<RemoteFetcher::Job>> done;
  while (done.empty()) done = fetcher->take_done(/*wait=*/true);
  EXPECT_EQ(done[0]->gets[0].status.code(), StatusCode::kUnavailable);
  // Jobs still queued when it goes are dropped, not waited for forever.
  for (int i = 0; i < 8; ++i) fetcher->submit(ticket, reads);
  fetcher.reset();
}

// A source whose blocks of a chain still being computed come only once it is done (as a prefill
// instance's do); it notes which chains it has begun.
class GatedSource final : public BlockSource {
 public:
  void get(std::span<BlockGet> blocks) override {
    ++reads;
    for (BlockGet& g : blocks) {
      ++begun;
      while (g.producing != nullptr && g.producing->load()) std::this_thread::sleep_for(1ms);
      std::fill(g.out.begin(), g.out.end(), std::byte{7});
      g.status = Status::Ok();
    }
  }
  std::atomic<int> reads{0};
  std::atomic<int> begun{0};
};

// Waits up to a few seconds for the next done jobs.
std::vector<std::unique_ptr<RemoteFetcher::Job>> next_done(RemoteFetcher& f) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  std::vector<std::unique_ptr<RemoteFetcher::Job>> done;
  while (done.empty() && std::chrono::steady_clock::now() < until) {
    done = f.take_done(/*wait=*/true, std::chrono::steady_clock::now() + 100ms);
  }
  return done;
}

// With a source of their own, jobs whose blocks a prefill is still computing are read on a thread
// of their own: one waiting for its prefill holds back no job queued after it, and jobs taken
// together are done one by one, each as its own chain ends.
TEST(RemoteFetcherProducingTest, AJobWaitingForItsPrefillHoldsBackNoOtherJob) {
  GatedSource source, waiting;
  RemoteFetcher fetcher(source, &waiting);
  const Block a = block(1), b = block(2), c = block(3), d = block(4);
  std::vector<std::vector<std::byte>> out(4, std::vector<std::byte>(kBlockBytes));
  auto job = [&](const Block& k, size_t i) {
    return std::vector<RemoteFetcher::Block>{
        {k.key, BlockId{static_cast<int32_t>(i)}, k.b.tokens, out[i]}};
  };
  auto ticket = std::make_shared<PrefetchTicket>();
  auto a_running = std::make_shared<std::atomic<bool>>(true);
  fetcher.submit(ticket, job(a, 0), a_running);
  while (waiting.begun.load() == 0) std::this_thread::sleep_for(1ms);
  fetcher.submit(ticket, job(b, 1));  // queued while a's read waits: done before a's prefill ends
  std::vector<std::unique_ptr<RemoteFetcher::Job>> done = next_done(fetcher);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->blocks[0].key, b.key);
  EXPECT_TRUE(done[0]->gets[0].status.ok());
  EXPECT_EQ(out[1][0], std::byte{7});
  EXPECT_EQ(source.reads.load(), 1);
  a_running->store(false);
  done = next_done(fetcher);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->blocks[0].key, a.key);

  auto c_running = std::make_shared<std::atomic<bool>>(true);
  auto d_running = std::make_shared<std::atomic<bool>>(true);
  const int begun = waiting.begun.load();
  fetcher.submit(ticket, job(c, 2), c_running);
  fetcher.submit(ticket, job(d, 3), d_running);
  while (waiting.begun.load() == begun) std::this_thread::sleep_for(1ms);
  c_running->store(false);
  done = next_done(fetcher);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->blocks[0].key, c.key);
  EXPECT_FALSE(fetcher.idle());
  d_running->store(false);
  done = next_done(fetcher);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->blocks[0].key, d.key);
  EXPECT_TRUE(fetcher.idle());
}

// With one source the producing jobs are read after the others, still one by one: the first is
// done while the second waits, and a job queued meanwhile goes before the second.
TEST(RemoteFetcherProducingTest, OnOneSourceProducingJobsAreDoneOneByOne) {
  GatedSource source;
  RemoteFetcher fetcher(source);
  const Block c = block(3), d = block(4), e = block(5);
  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(kBlockBytes));
  auto job = [&](const Block& k, size_t i) {
    return std::vector<RemoteFetcher::Block>{
        {k.key, BlockId{static_cast<int32_t>(i)}, k.b.tokens, out[i]}};
  };
  auto ticket = std::make_shared<PrefetchTicket>();
  auto c_running = std::make_shared<std::atomic<bool>>(true);
  auto d_running = std::make_shared<std::atomic<bool>>(true);
  fetcher.submit(ticket, job(c, 0), c_running);
  fetcher.submit(ticket, job(d, 1), d_running);
  while (source.begun.load() == 0) std::this_thread::sleep_for(1ms);
  fetcher.submit(ticket, job(e, 2));
  c_running->store(false);
  // c, then e (queued while c was read) before d, whose prefill still runs.
  std::vector<TierKey> order;
  while (order.size() < 2) {
    std::vector<std::unique_ptr<RemoteFetcher::Job>> some = next_done(fetcher);
    ASSERT_FALSE(some.empty());
    for (const auto& j : some) order.push_back(j->blocks[0].key);
  }
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], c.key);
  EXPECT_EQ(order[1], e.key) << "a job queued meanwhile goes before d";
  EXPECT_FALSE(fetcher.idle());
  d_running->store(false);
  std::vector<std::unique_ptr<RemoteFetcher::Job>> done = next_done(fetcher);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->blocks[0].key, d.key);
  EXPECT_TRUE(fetcher.idle());
}

}  // namespace
}  // namespace strata::kv

// Disaggregation at the KV tiers: a prefill instance's tiers keep every block they write down in
// their outbox, and a decode instance's tiers read the blocks a queued prompt lacks from it (an
// in-process peer, or UCX over TCP loopback), promote them, and find exactly the bytes the
// prefill instance computed. Faults: a corrupt value, a missing block, a peer that is gone --
// each ends the chain there, the rest is recomputed, and no slot stays pinned on either side.
// On one machine (a region in shared memory, as CI has no GPU for CUDA IPC): the blocks are
// copied out of the prefill instance's region, and a slot taken again during the copy, a record
// that is malformed or fails its checksum, a region that does not open and a prefill instance
// dying between the copy and its confirmation are each a miss (or values instead), never a
// wrong block.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/block_mover.h"
#include "kv/block_value.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_tiers.h"
#include "kv/peer_outbox.h"
#include "kv/peer_region.h"
#include "kv/peer_slots.h"
#include "kv/ucx_peer_transport.h"
#include "tests/kv/deferred_mover.h"
#include "tests/kv/kv_tiers_fixture.h"

namespace strata::kv {
namespace {

// A cache over a host pool with tiers beneath, as the CPU engine has it.
struct Instance {
  std::unique_ptr<KvCacheManager> cache;
  std::unique_ptr<HostKvBuffer> pool;
  std::unique_ptr<BlockMover> mover;
  std::unique_ptr<KvTiers> tiers;

  static constexpr int32_t kPoolBlocks = 9;
  using MakeMover = std::function<std::unique_ptr<BlockMover>(HostKvBuffer& pool)>;

  // make_mover: the pool's mover (HostBlockMover unless given).
  explicit Instance(KvTierConfig c, const MakeMover& make_mover = {}) {
    cache = std::make_unique<KvCacheManager>(KvCacheConfig{
        .block_size = kBs, .groups = {{KvGroupSpec::full(small_spec()), kPoolBlocks}}});
    pool = std::make_unique<HostKvBuffer>(small_layout(), kPoolBlocks);
    mover = make_mover ? make_mover(*pool) : std::make_unique<HostBlockMover>(*pool);
    c.host_bytes = 16 * small_layout().block_bytes();
    c.ns = 42;
    Result<std::unique_ptr<KvTiers>> t = KvTiers::create(c, *cache, *mover);
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (t.ok()) tiers = std::move(t).value();
  }
  ~Instance() {
    if (!tiers) return;
    tiers->drain_io();
    EXPECT_EQ(tiers->host().num_pinned(), 0) << "a slot stayed pinned";
    tiers->host().check_invariants();
    EXPECT_EQ(cache->pool(0).num_used_blocks(), 0) << "a pool block leaked";
    cache->pool(0).check_invariants();
    tiers.reset();
  }
  std::span<std::byte> bytes(BlockId b) {
    const int64_t n = small_layout().block_bytes();
    return {pool->data() + b.value * n, static_cast<size_t>(n)};
  }
  // Computes p's blocks (each block's bytes a function of its first token) into the pool.
  void compute(const std::vector<int32_t>& p) {
    BlockTable t(kBs);
    ASSERT_TRUE(cache->allocate_slots(t, static_cast<int32_t>(p.size())));
    for (int32_t b = 0; b < static_cast<int32_t>(p.size()) / kBs; ++b) {
      fill(bytes(t.blocks(0)[static_cast<size_t>(b)]),
           static_cast<uint32_t>(p[static_cast<size_t>(b) * kBs]));
    }
    cache->cache_full_blocks(t, p, static_cast<int32_t>(p.size()), {});
    cache->free(t);
  }
  // As a queued request: the prefetch reads what p lacks, then the promotion; the hit's blocks
  // (their count) afterwards, each checked to hold what compute() wrote.
  int32_t fetch_and_promote(const std::vector<int32_t>& p) {
    PrefetchState state;
    tiers->prefetch(p, {}, state);
    while (state.pending()) tiers->wait_io();
    PrefixHit hit = cache->find_cached_prefix(p, {});
    tiers->promote(p, {}, hit);
    const auto blocks = static_cast<int32_t>(hit.blocks().size());
    for (int32_t b = 0; b < blocks; ++b) {
      std::vector<std::byte> want(static_cast<size_t>(small_layout().block_bytes()));
      fill(want, static_cast<uint32_t>(p[static_cast<size_t>(b) * kBs]));
      const std::span<std::byte> got = bytes(hit.blocks()[static_cast<size_t>(b)]);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "block " << b;
    }
    return blocks;
  }
};

std::vector<int32_t> prompt(int32_t first_token, int32_t num_blocks) {
  std::vector<int32_t> p(static_cast<size_t>(num_blocks * kBs + 1));
  std::iota(p.begin(), p.end(), first_token);
  return p;
}

// The prefill instance's lookup in process (its outbox's values, and its region's slot records
// where it has one), with the faults a wire can have.
class LocalPeer final : public PeerClient {
 public:
  explicit LocalPeer(PeerOutbox& outbox, std::function<void(std::vector<std::string>&)> fault = {},
                     PeerSlots* slots = nullptr)
      : outbox_(outbox), fault_(std::move(fault)), slots_(slots) {}
  Status get(std::span<const TierKey> keys, std::vector<std::string>& values) override {
    return get_flagged(keys, 0, values);
  }
  Status get_flagged(std::span<const TierKey> keys, uint16_t flags,
                     std::vector<std::string>& values) override {
    ++round_trips;
    values.assign(keys.size(), std::string());
    peer_lookup(slots_, &outbox_, keys, flags, values);
    if (fault_) fault_(values);
    return Status::Ok();
  }
  int round_trips = 0;

 private:
  PeerOutbox& outbox_;
  std::function<void(std::vector<std::string>&)> fault_;
  PeerSlots* slots_;
};

// Answers `answers` round trips, then is gone (Unavailable) for good.
class DyingPeer final : public PeerClient {
 public:
  DyingPeer(PeerOutbox& outbox, int answers, PeerSlots* slots = nullptr)
      : alive_(outbox, {}, slots), answers_(answers) {}
  Status get(std::span<const TierKey> keys, std::vector<std::string>& values) override {
    return get_flagged(keys, 0, values);
  }
  Status get_flagged(std::span<const TierKey> keys, uint16_t flags,
                     std::vector<std::string>& values) override {
    if (answers_-- > 0) return alive_.get_flagged(keys, flags, values);
    values.assign(keys.size(), std::string());
    return Status::Unavailable("the peer is gone");
  }

 private:
  LocalPeer alive_;
  int answers_;
};

KvTierConfig prefill_config() {
  KvTierConfig c;
  c.policy = OffloadPolicy::kWriteThrough;
  c.peer_outbox_bytes = 64 * small_layout().block_bytes();
  return c;
}

KvTierConfig decode_config(PeerConnect connect, std::chrono::milliseconds wait,
                           size_t chunk_blocks = 64) {
  KvTierConfig c;
  c.peer_connects = {std::move(connect)};
  c.peer_options.wait = wait;
  c.peer_options.chunk_blocks = chunk_blocks;
  return c;
}

// Computes p on the prefill instance and waits until its outbox holds every full block.
void prefill(Instance& in, const std::vector<int32_t>& p) {
  in.compute(p);
  in.tiers->poll();  // write-through: the blocks go down and are lent to the outbox
  in.tiers->outbox()->flush();
  in.tiers->poll();  // the outbox's releases
}

TEST(KvTiersPeerTest, ADecodeInstanceReadsThePromptsBlocksFromThePrefillInstance) {
  Instance pre(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  ASSERT_EQ(pre.tiers->outbox()->stats().num_put, 3);
  Instance dec(decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        return std::unique_ptr<PeerClient>(new LocalPeer(*pre.tiers->outbox()));
      },
      std::chrono::milliseconds(200)));
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  EXPECT_EQ(dec.tiers->peer_stats()->num_hits, 3);
  EXPECT_EQ(dec.tiers->stats().num_remote_hit_blocks, 3);
}

// Several prefill instances (a router picks one per request): each prompt's blocks come from
// the one that computed it, the other is asked only when the first lacks a block, and a dead one
// does not stop reads from the live one.
TEST(KvTiersPeerTest, ADecodeInstanceReadsFromWhicheverPrefillInstanceComputedThePrompt) {
  Instance pre_a(prefill_config());
  Instance pre_b(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  const std::vector<int32_t> q = prompt(500, 2);
  prefill(pre_a, p);
  prefill(pre_b, q);
  LocalPeer* peer_a = nullptr;
  LocalPeer* peer_b = nullptr;
  KvTierConfig c = decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        auto peer = std::make_unique<LocalPeer>(*pre_a.tiers->outbox());
        peer_a = peer.get();
        return std::unique_ptr<PeerClient>(std::move(peer));
      },
      std::chrono::milliseconds(200));
  c.peer_connects.emplace_back([&]() -> Result<std::unique_ptr<PeerClient>> {
    auto peer = std::make_unique<LocalPeer>(*pre_b.tiers->outbox());
    peer_b = peer.get();
    return std::unique_ptr<PeerClient>(std::move(peer));
  });
  c.peer_connects.emplace_back([]() -> Result<std::unique_ptr<PeerClient>> {
    return Status::Unavailable("a third prefill instance that is down");
  });
  Instance dec(std::move(c));
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  ASSERT_NE(peer_a, nullptr);
  EXPECT_EQ(peer_a->round_trips, 1) << "A has p's blocks: asked once";
  EXPECT_EQ(peer_b, nullptr) << "B was not needed";
  EXPECT_EQ(dec.fetch_and_promote(q), 2);
  ASSERT_NE(peer_b, nullptr);
  EXPECT_EQ(peer_a->round_trips, 2) << "A, asked first, lacks q's first block";
  EXPECT_EQ(peer_b->round_trips, 1);
  EXPECT_EQ(dec.tiers->peer_stats()->num_hits, 5);
  EXPECT_EQ(dec.tiers->peer_stats()->num_missing, 0);
}

TEST(KvTiersPeerTest, OnlyTheBlocksTheDecodeInstanceLacksMove) {
  Instance pre(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  Instance dec(decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        return std::unique_ptr<PeerClient>(new LocalPeer(*pre.tiers->outbox()));
      },
      std::chrono::milliseconds(200)));
  // The decode instance computed the first block itself (a shared system prompt, say).
  dec.compute(std::vector<int32_t>(p.begin(), p.begin() + kBs + 1));
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  EXPECT_EQ(dec.tiers->peer_stats()->num_get_blocks, 2);
}

TEST(KvTiersPeerTest, BlocksComputedWhileTheDecodeInstanceWaitsArrive) {
  Instance pre(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  Instance dec(decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        return std::unique_ptr<PeerClient>(new LocalPeer(*pre.tiers->outbox()));
      },
      std::chrono::seconds(20)));
  PrefetchState state;
  dec.tiers->prefetch(p, {}, state);
  ASSERT_TRUE(state.pending());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // asked, absent, asked again
  prefill(pre, p);
  while (state.pending()) dec.tiers->wait_io();
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  EXPECT_GE(dec.tiers->peer_stats()->num_round_trips, 2);
  EXPECT_EQ(dec.tiers->peer_stats()->num_missing, 0);
}

// PeerSource alone, over a peer that answers from a map of values (as an outbox would), for the
// rules of a get with several chains and of a chain still being computed.
struct ValueMap {
  std::mutex mu;
  std::unordered_map<TierKey, std::string, TierKeyHasher> values;
};

class MapPeer final : public PeerClient {
 public:
  explicit MapPeer(std::shared_ptr<ValueMap> map) : map_(std::move(map)) {}
  Status get(std::span<const TierKey> keys, std::vector<std::string>& values) override {
    const std::lock_guard lock(map_->mu);
    values.assign(keys.size(), std::string());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = map_->values.find(keys[i]);
      if (it != map_->values.end()) values[i] = it->second;
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<ValueMap> map_;
};

struct PeerSourceHarness {
  static constexpr uint64_t kNs = 42;
  BlockValueFormat format{kNs, kBs, small_layout().block_bytes()};
  std::shared_ptr<ValueMap> map = std::make_shared<ValueMap>();
  std::unique_ptr<PeerSource> source;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::byte>> out;
  std::vector<BlockGet> gets;

  explicit PeerSourceHarness(std::chrono::milliseconds wait) {
    source = std::make_unique<PeerSource>(
        format,
        [m = map]() -> Result<std::unique_ptr<PeerClient>> {
          return std::unique_ptr<PeerClient>(new MapPeer(m));
        },
        PeerSourceOptions{wait});
  }
  static BlockHash hash(int32_t b) {
    BlockHash h;
    h.bytes[0] = static_cast<uint8_t>(b + 1);
    return h;
  }
  // Block b as the prefill instance would serve it: kBs tokens b, bytes fill(b).
  void put(int32_t b) {
    const std::vector<int32_t> t(kBs, b);
    std::vector<std::byte> bytes(static_cast<size_t>(small_layout().block_bytes()));
    fill(bytes, static_cast<uint32_t>(b));
    std::string v = format.encode(hash(b), t, bytes, tier_checksum(bytes));
    const std::lock_guard lock(map->mu);
    map->values[TierKey{kNs, hash(b)}] = std::move(v);
  }
  // Asks for blocks `ids` as chain `chain`.
  void ask(std::initializer_list<int32_t> ids, int32_t chain,
           const std::atomic<bool>* producing = nullptr) {
    size_t i = tokens.size();
    for (const int32_t b : ids) {
      tokens.emplace_back(kBs, b);
      out.emplace_back(static_cast<size_t>(small_layout().block_bytes()));
    }
    for (const int32_t b : ids) {
      gets.push_back(BlockGet{hash(b), tokens[i], out[i], 0, {}, chain, producing});
      ++i;
    }
  }
};

// A get that carries several requests' chains: a block missing from the first ends that chain
// only, and the second request's blocks are read.
TEST(KvTiersPeerTest, AMissingBlockEndsItsOwnChainOnly) {
  PeerSourceHarness h(std::chrono::milliseconds(20));
  h.ask({0, 1, 2}, 0);
  h.ask({3, 4}, 1);
  for (const int32_t b : {0, 2, 3, 4}) h.put(b);
  h.source->get(h.gets);
  EXPECT_TRUE(h.gets[0].status.ok());
  EXPECT_EQ(h.gets[1].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(h.gets[2].status.code(), StatusCode::kNotFound) << "past the chain's missing block";
  EXPECT_TRUE(h.gets[3].status.ok()) << h.gets[3].status.message();
  EXPECT_TRUE(h.gets[4].status.ok()) << h.gets[4].status.message();
  EXPECT_EQ(h.source->stats().num_missing, 1);
}

// Streaming: while the prefill instance is still computing the chain (producing true), a block
// it has not made yet is waited for past the wait, and read when it comes; once the prefill is
// over, a block that never comes ends the chain a wait later.
TEST(KvTiersPeerTest, AChainStillBeingComputedIsWaitedForPastTheWait) {
  constexpr auto kWait = std::chrono::milliseconds(30);
  PeerSourceHarness h(kWait);
  std::atomic<bool> producing{true};
  h.ask({0, 1, 2}, 0, &producing);
  h.put(0);
  // Block 1 comes after several waits; block 2 never, and the prefill ends after block 1.
  std::thread prefill([&] {
    std::this_thread::sleep_for(6 * kWait);
    h.put(1);
    std::this_thread::sleep_for(2 * kWait);
    producing.store(false);
  });
  const auto start = std::chrono::steady_clock::now();
  h.source->get(h.gets);
  const auto took = std::chrono::steady_clock::now() - start;
  prefill.join();
  EXPECT_TRUE(h.gets[0].status.ok());
  EXPECT_TRUE(h.gets[1].status.ok()) << h.gets[1].status.message();
  std::vector<std::byte> want(static_cast<size_t>(small_layout().block_bytes()));
  fill(want, 1);
  EXPECT_EQ(h.out[1], want);
  EXPECT_EQ(h.gets[2].status.code(), StatusCode::kNotFound);
  EXPECT_GE(took, 8 * kWait) << "the wait runs from the prefill's end";
  EXPECT_EQ(h.source->stats().num_missing, 1);
  // The transfer's own time: the two round trips that brought a block, not the waits.
  const double transfer = h.source->stats().transfer_seconds;
  EXPECT_GT(transfer, 0.0);
  EXPECT_LT(transfer, std::chrono::duration<double>(2 * kWait).count());
}

// The same through the tiers, as a decode instance queues a request the moment it sends the
// prompt to the prefill instance (EngineRequest::remote_prefill_running): the read began before
// the prefill and outlasts the wait, and every block arrives.
TEST(KvTiersPeerTest, AReadStartedWithThePrefillWaitsForItsBlocks) {
  Instance pre(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  Instance dec(decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        return std::unique_ptr<PeerClient>(new LocalPeer(*pre.tiers->outbox()));
      },
      std::chrono::milliseconds(20)));
  auto running = std::make_shared<std::atomic<bool>>(true);
  PrefetchState state;
  state.remote_prefill_running = running;
  dec.tiers->prefetch(p, {}, state);
  ASSERT_TRUE(state.pending());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // several waits
  prefill(pre, p);
  running->store(false);
  while (state.pending()) dec.tiers->wait_io();
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  EXPECT_EQ(dec.tiers->peer_stats()->num_missing, 0);
}

TEST(KvTiersPeerTest, ACorruptValueEndsTheChainThere) {
  Instance pre(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  Instance dec(decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        return std::unique_ptr<PeerClient>(
            new LocalPeer(*pre.tiers->outbox(), [](std::vector<std::string>& v) {
              if (v.size() > 1 && !v[1].empty()) v[1][v[1].size() / 2] ^= 0x20;
            }));
      },
      std::chrono::milliseconds(200)));
  EXPECT_EQ(dec.fetch_and_promote(p), 1) << "the first block, before the corrupt one";
  EXPECT_EQ(dec.tiers->peer_stats()->num_bad, 1);
}

TEST(KvTiersPeerTest, ABlockThePrefillInstanceNeverHasEndsTheChainAfterTheWait) {
  Instance pre(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  Instance dec(decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        return std::unique_ptr<PeerClient>(new LocalPeer(
            *pre.tiers->outbox(), [](std::vector<std::string>& v) { v.back().clear(); }));
      },
      std::chrono::milliseconds(50)));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(dec.fetch_and_promote(p), 2);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_EQ(dec.tiers->peer_stats()->num_missing, 1);
}

// The prefill instance dies mid-transfer: the first round trip's block arrives, the second
// finds no peer. The block that came is used, the rest is recomputed, and a later read finds no
// peer either (connecting again at most once a second).
TEST(KvTiersPeerTest, APrefillInstanceDyingMidTransferLeavesWhatCame) {
  Instance pre(prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  int connects = 0;
  Instance dec(decode_config(
      [&]() -> Result<std::unique_ptr<PeerClient>> {
        ++connects;
        return std::unique_ptr<PeerClient>(new DyingPeer(*pre.tiers->outbox(), 1));
      },
      std::chrono::seconds(20), /*chunk_blocks=*/1));
  EXPECT_EQ(dec.fetch_and_promote(p), 1);
  EXPECT_EQ(dec.tiers->peer_stats()->num_hits, 1);
  EXPECT_EQ(dec.tiers->peer_stats()->num_errors, 1);
  EXPECT_EQ(dec.fetch_and_promote(prompt(500, 2)), 0);
  EXPECT_LE(connects, 2);
}

TEST(KvTiersPeerTest, APrefillInstanceThatIsGoneMeansRecomputing) {
  Instance dec(decode_config(
      []() -> Result<std::unique_ptr<PeerClient>> {
        return Status::Unavailable("connection refused");
      },
      std::chrono::seconds(20)));
  const std::vector<int32_t> p = prompt(100, 3);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(dec.fetch_and_promote(p), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "not the wait for blocks: the peer is not there";
}

// Over UCX on TCP loopback, the transport a deployment runs; the prefill instance goes away
// between two requests, and the second is recomputed.
TEST(KvTiersPeerTest, OverUcxAndThePrefillInstanceDyingBetweenRequests) {
  auto pre = std::make_unique<Instance>(prefill_config());
  PeerOutbox* const outbox = pre->tiers->outbox();
  Result<std::unique_ptr<PeerServer>> server = start_ucx_peer_server(
      "127.0.0.1", 0,
      [outbox](std::span<const TierKey> keys, uint16_t /*flags*/,
               std::vector<std::string>& values) { outbox->lookup(keys, values); });
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string address = (*server)->address();
  Instance dec(decode_config(
      [address]() { return connect_ucx_peer(address, std::chrono::milliseconds(2000)); },
      std::chrono::milliseconds(100)));
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(*pre, p);
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  server->reset();
  pre.reset();
  EXPECT_EQ(dec.fetch_and_promote(prompt(500, 2)), 0);
  EXPECT_GE(dec.tiers->peer_stats()->num_errors, 1);
}

TEST(KvTiersPeerTest, AnOutboxKeepsItsBytesBoundDroppingTheLeastRecent) {
  PeerOutbox outbox(BlockValueFormat(42, kBs, small_layout().block_bytes()),
                    2 * static_cast<int64_t>(
                            BlockValueFormat(42, kBs, small_layout().block_bytes()).max_bytes()));
  std::vector<std::byte> block(static_cast<size_t>(small_layout().block_bytes()));
  const std::vector<int32_t> tokens(kBs, 7);
  BlockHasher hasher;
  std::vector<BlockHash> hashes;
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> t(kBs, i);
    hashes.push_back(hasher.hash(nullptr, t, {}));
    fill(block, static_cast<uint32_t>(i));
    ASSERT_TRUE(outbox.put_borrowed(hashes.back(), tokens, block, 0, static_cast<uint64_t>(i)));
    outbox.flush();
    if (i == 1) {  // the first is read: now the most recent
      std::vector<std::string> v(1);
      outbox.lookup(std::vector<TierKey>{TierKey{42, hashes[0]}}, v);
      EXPECT_FALSE(v[0].empty());
    }
  }
  EXPECT_EQ(outbox.take_released().size(), 3U);
  std::vector<TierKey> keys;
  keys.reserve(hashes.size() + 1);
  for (const BlockHash& h : hashes) keys.push_back(TierKey{42, h});
  keys.push_back(TierKey{43, hashes[0]});  // another namespace: never served
  std::vector<std::string> values(keys.size());
  outbox.lookup(keys, values);
  EXPECT_FALSE(values[0].empty());
  EXPECT_TRUE(values[1].empty()) << "the least recent went";
  EXPECT_FALSE(values[2].empty());
  EXPECT_TRUE(values[3].empty());
  EXPECT_EQ(outbox.stats().num_evicted, 1);
}

// ---- One machine: the prefill instance's region (shared memory here; CUDA IPC on a GPU) ----

constexpr int32_t kRegionSlots = 6;

KvTierConfig region_prefill_config() {
  KvTierConfig c = prefill_config();
  c.peer_region_bytes = kPeerRegionHeaderBytes + kRegionSlots * small_layout().block_bytes();
  c.peer_region = [](int64_t bytes) { return create_shm_peer_region(bytes); };
  return c;
}

KvTierConfig region_decode_config(PeerConnect connect, PeerRegionOpener open = {}) {
  KvTierConfig c = decode_config(std::move(connect), std::chrono::milliseconds(200));
  c.peer_options.open_region = open ? std::move(open) : shm_peer_region_opener();
  return c;
}

PeerConnect local_peer(Instance& pre, std::function<void(std::vector<std::string>&)> fault = {}) {
  return [&pre, fault]() -> Result<std::unique_ptr<PeerClient>> {
    return std::unique_ptr<PeerClient>(
        new LocalPeer(*pre.tiers->outbox(), fault, pre.tiers->peer_slots()));
  };
}

// A decode instance's pool mover whose first copy out of a region runs `during` once the
// bytes are copied (what the prefill instance may do while a decode instance copies out of its
// region), and that counts the blocks it copied out of regions and into the pool from host slots.
class HookedMover final : public PassThroughMover {
 public:
  HookedMover(HostKvBuffer& pool, std::function<void()> during)
      : PassThroughMover(pool), during_(std::move(during)) {}
  void from_host(std::span<const BlockCopy> pairs, const HostKvBuffer& host) override {
    from_host_blocks += static_cast<int64_t>(pairs.size());
    PassThroughMover::from_host(pairs, host);
  }
  uint64_t start_from_region(std::span<const RegionCopy> copies) override {
    from_region_blocks += static_cast<int64_t>(copies.size());
    now_.start_from_region(copies);
    if (during_) std::exchange(during_, nullptr)();
    return kDoneTicket;
  }
  int64_t from_host_blocks = 0;
  int64_t from_region_blocks = 0;

 private:
  std::function<void()> during_;
};

// The prefill instance takes every slot of its region again and scribbles over them.
void retake_every_slot(PeerSlots& slots) {
  std::vector<BlockHash> other(kRegionSlots);
  for (size_t i = 0; i < other.size(); ++i) other[i].bytes[0] = static_cast<uint8_t>(i + 1);
  const std::vector<int32_t> taken = slots.reserve(other);
  std::span<std::byte> all(slots.region().slots(),
                           static_cast<size_t>(kRegionSlots * small_layout().block_bytes()));
  std::fill(all.begin(), all.end(), std::byte{0x5a});
  for (const int32_t s : taken) slots.abandon(s);
}

TEST(KvTiersPeerTest, OnOneMachineBlocksAreCopiedOutOfThePrefillInstancesRegion) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  ASSERT_NE(pre.tiers->peer_slots(), nullptr);
  EXPECT_EQ(pre.tiers->peer_slots()->stats().num_put, 3);
  HookedMover* mover = nullptr;
  Instance dec(region_decode_config(local_peer(pre)), [&](HostKvBuffer& pool) {
    auto m = std::make_unique<HookedMover>(pool, nullptr);
    mover = m.get();
    return m;
  });
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  const PeerSourceStats s = *dec.tiers->peer_stats();
  EXPECT_EQ(s.num_hits, 3);
  EXPECT_EQ(s.num_slot_hits, 3);
  // Straight from the region into the pool: no host slot held them on the way.
  EXPECT_EQ(s.num_slot_pool_blocks, 3);
  EXPECT_EQ(mover->from_region_blocks, 3);
  EXPECT_EQ(mover->from_host_blocks, 0);
  EXPECT_EQ(dec.tiers->host().num_blocks(), 0);
  EXPECT_EQ(dec.tiers->stats().num_host_hit_blocks, 3);
  EXPECT_EQ(dec.cache->pool(0).num_cached_blocks(), 3);
  EXPECT_EQ(s.bytes_read, 3 * small_layout().block_bytes()) << "the blocks' bytes are counted";
  EXPECT_EQ(s.num_round_trips, 2) << "the records, then their confirmation";
  EXPECT_EQ(pre.tiers->outbox()->stats().num_served, 0) << "no block moved as a value";
  EXPECT_EQ(pre.tiers->peer_slots()->stats().num_served, 6);
  // A decode instance that does not ask for records gets values from the same prefill instance.
  Instance values(decode_config(local_peer(pre), std::chrono::milliseconds(200)));
  EXPECT_EQ(values.fetch_and_promote(p), 3);
  EXPECT_EQ(values.tiers->peer_stats()->num_slot_hits, 0);
  EXPECT_EQ(values.tiers->peer_stats()->num_slot_pool_blocks, 0);
  EXPECT_EQ(values.tiers->host().num_blocks(), 3) << "values come through host slots";
  EXPECT_EQ(pre.tiers->outbox()->stats().num_served, 3);
}

// A decode instance whose pool mover holds its copies out of the region until told (a GPU's
// copy stream, DeferredMover), with p's blocks read from `pre` and their promotion started.
struct HeldRegionPromotion {
  DeferredMover* mover = nullptr;
  Instance dec;
  PrefetchState state;
  PrefixHit hit;
  KvTiers::Progress started;

  HeldRegionPromotion(Instance& pre, const std::vector<int32_t>& p)
      : dec(region_decode_config(local_peer(pre)), [this](HostKvBuffer& pool) {
          auto m = std::make_unique<DeferredMover>(pool);
          mover = m.get();
          return m;
        }) {
    dec.tiers->prefetch(p, {}, state);
    while (state.pending()) dec.tiers->wait_io();
    hit = dec.cache->find_cached_prefix(p, {});
    started = dec.tiers->promote_async(&state, p, {}, hit);
  }
};

// A GPU's copy stream: the copies out of the region are still running when the promotion is
// first looked at; the confirmation waits for them, and only then are the blocks used.
TEST(KvTiersPeerTest, RegionCopiesStillRunningAreConfirmedOnlyOnceDone) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  HeldRegionPromotion held(pre, p);
  auto& [mover, dec, state, hit, started] = held;
  EXPECT_TRUE(started.pending);
  EXPECT_EQ(mover->num_in_flight(), 1);
  EXPECT_FALSE(dec.tiers->promotion_ready());
  const int64_t served = pre.tiers->peer_slots()->stats().num_served;
  EXPECT_EQ(served, 3) << "not confirmed before the copies are done";
  mover->complete();
  dec.tiers->wait_promotion();
  EXPECT_EQ(pre.tiers->peer_slots()->stats().num_served, 6);
  const KvTiers::Progress done = dec.tiers->promote_async(&state, p, {}, hit);
  EXPECT_FALSE(done.pending);
  EXPECT_EQ(done.promoted.host_blocks, 3);
  EXPECT_EQ(hit.blocks().size(), 3U);
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_pool_blocks, 3);
  for (size_t b = 0; b < 3; ++b) {
    std::vector<std::byte> want(static_cast<size_t>(small_layout().block_bytes()));
    fill(want, static_cast<uint32_t>(p[b * kBs]));
    const std::span<std::byte> got = dec.bytes(hit.blocks()[b]);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "block " << b;
  }
}

TEST(KvTiersPeerTest, TheRegionKeepsTheMostRecentBlocksInItsSlots) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 4);
  const std::vector<int32_t> q = prompt(500, 4);
  prefill(pre, p);
  prefill(pre, q);  // 8 blocks through 6 slots: p's first two gave theirs to q's last two
  const PeerSlots& slots = *pre.tiers->peer_slots();
  EXPECT_EQ(slots.stats().num_put, 8);
  EXPECT_EQ(slots.stats().num_reused, 2);
  BlockHasher hasher;
  std::vector<BlockHash> ph;
  for (size_t b = 0; b < 4; ++b) {
    ph.push_back(hasher.hash(b == 0 ? nullptr : &ph.back(),
                             std::span<const int32_t>(p).subspan(b * kBs, kBs), {}));
  }
  EXPECT_FALSE(slots.holds(ph[0]));
  EXPECT_FALSE(slots.holds(ph[1]));
  EXPECT_TRUE(slots.holds(ph[2]));
  EXPECT_TRUE(slots.holds(ph[3]));
  // p's first blocks come as values from the outbox, its last ones out of the region.
  Instance dec(region_decode_config(local_peer(pre)));
  EXPECT_EQ(dec.fetch_and_promote(p), 4);
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_hits, 2);
}

// The prefill instance takes every slot again (and scribbles over them) as the decode instance
// copies the blocks into its pool: the bytes copied pass their checksum, but the confirmation
// sees the slots' records changed, so no block copied then is used -- its pool block goes back
// uncached, none leaks (~Instance) -- and the next read finds them as values.
TEST(KvTiersPeerTest, ASlotTakenAgainDuringTheCopyIsAMissNeverAWrongBlock) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  PeerSlots& slots = *pre.tiers->peer_slots();
  Instance dec(region_decode_config(local_peer(pre)), [&](HostKvBuffer& pool) {
    return std::make_unique<HookedMover>(pool, [&] { retake_every_slot(slots); });
  });
  EXPECT_EQ(dec.fetch_and_promote(p), 0) << "recomputed";
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_reused, 3);
  EXPECT_EQ(dec.tiers->peer_stats()->num_bad, 1) << "counted as the chain's end";
  EXPECT_EQ(dec.tiers->peer_stats()->num_hits, 0);
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_hits, 0);
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_pool_blocks, 0);
  EXPECT_EQ(dec.tiers->stats().num_faults, 1) << "the chain ends at its first block";
  EXPECT_EQ(dec.cache->pool(0).num_cached_blocks(), 0);
  EXPECT_EQ(dec.cache->pool(0).num_used_blocks(), 0);
  // The region holds none of p now; the outbox does.
  Instance again(region_decode_config(local_peer(pre)));
  EXPECT_EQ(again.fetch_and_promote(p), 3);
  EXPECT_EQ(again.tiers->peer_stats()->num_slot_hits, 0);
}

// The same with the copies still running when the slots are taken again (a GPU's copy stream):
// the scribbled bytes fail their checksum here on the CPU, and on either path the confirmation
// finds the records changed; the blocks are misses and their pool blocks go back.
TEST(KvTiersPeerTest, ASlotTakenAgainWhileItsCopyIsInFlightIsAMiss) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  HeldRegionPromotion held(pre, p);
  auto& [mover, dec, state, hit, started] = held;
  EXPECT_TRUE(started.pending);
  retake_every_slot(*pre.tiers->peer_slots());
  mover->complete();
  dec.tiers->wait_promotion();
  const KvTiers::Progress done = dec.tiers->promote_async(&state, p, {}, hit);
  EXPECT_FALSE(done.pending);
  EXPECT_EQ(done.promoted.host_blocks, 0);
  EXPECT_TRUE(hit.blocks().empty());
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_pool_blocks, 0);
  EXPECT_EQ(dec.tiers->peer_stats()->num_bad, 1) << "the first block's checksum";
  EXPECT_EQ(dec.cache->pool(0).num_cached_blocks(), 0);
}

// A request that leaves the queue while its blocks are being copied out of the region: the pool
// blocks go back uncached (none leaks), and the blocks stay claimed, so the next promotion of the
// prompt copies them again without asking the prefill instance for them again.
TEST(KvTiersPeerTest, ACancelledRegionPromotionGivesItsPoolBlocksBackAndKeepsItsClaims) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  HeldRegionPromotion held(pre, p);
  auto& [mover, dec, state, hit, started] = held;
  EXPECT_TRUE(started.pending);
  EXPECT_EQ(dec.cache->pool(0).num_used_blocks(), 3);
  dec.tiers->cancel_promotion(&state);
  EXPECT_EQ(mover->num_in_flight(), 0);
  EXPECT_EQ(dec.cache->pool(0).num_used_blocks(), 0);
  EXPECT_EQ(dec.cache->pool(0).num_cached_blocks(), 0);
  const int64_t served = pre.tiers->peer_slots()->stats().num_served;
  PrefixHit again = dec.cache->find_cached_prefix(p, {});
  EXPECT_EQ(dec.tiers->promote(p, {}, again).host_blocks, 3);
  EXPECT_EQ(again.blocks().size(), 3U);
  EXPECT_EQ(pre.tiers->peer_slots()->stats().num_served, served + 3) << "the confirmation only";
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_pool_blocks, 6) << "copied, confirmed, twice";
}

// Rewrites every slot record of a round trip with edit.
std::function<void(std::vector<std::string>&)> edit_records(
    std::function<void(PeerSlotRecord&, std::string&)> edit) {
  return [edit](std::vector<std::string>& values) {
    for (std::string& v : values) {
      if (!is_peer_slot_record(v)) continue;
      Result<PeerSlotRecord> r = decode_peer_slot_record(v);
      ASSERT_TRUE(r.ok());
      encode_peer_slot_record(*r, v);
      edit(*r, v);
    }
  };
}

TEST(KvTiersPeerTest, ASlotRecordThatFailsItsChecksumIsAMiss) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  Instance dec(
      region_decode_config(local_peer(pre, edit_records([](PeerSlotRecord& r, std::string& v) {
                                        ++r.checksum;
                                        encode_peer_slot_record(r, v);
                                      }))));
  EXPECT_EQ(dec.fetch_and_promote(p), 0);
  EXPECT_EQ(dec.tiers->peer_stats()->num_bad, 1);
}

TEST(KvTiersPeerTest, MalformedSlotRecordsAreMisses) {
  const std::vector<int32_t> p = prompt(100, 3);
  const std::vector<std::function<void(PeerSlotRecord&, std::string&)>> faults = {
      [](PeerSlotRecord&, std::string& v) { v.resize(v.size() - 1); },  // truncated
      [](PeerSlotRecord& r, std::string& v) {                           // past the end
        r.slot_idx = kRegionSlots + 5;
        encode_peer_slot_record(r, v);
      },
      [](PeerSlotRecord& r, std::string& v) {  // another block's slot
        r.key.hash.bytes[0] ^= 1;
        encode_peer_slot_record(r, v);
      },
      [](PeerSlotRecord& r, std::string& v) {  // a block of another size
        r.block_bytes -= 4;
        encode_peer_slot_record(r, v);
      },
  };
  for (size_t f = 0; f < faults.size(); ++f) {
    Instance pre(region_prefill_config());
    prefill(pre, p);
    Instance dec(region_decode_config(local_peer(pre, edit_records(faults[f]))));
    EXPECT_EQ(dec.fetch_and_promote(p), 0) << "fault " << f;
    EXPECT_EQ(dec.tiers->peer_stats()->num_bad, 1) << "fault " << f;
  }
}

// A region that does not open here (another machine's, a handle gone stale): that peer's blocks
// are asked for again as values.
TEST(KvTiersPeerTest, ARegionThatDoesNotOpenFallsBackToValues) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  int opens = 0;
  Instance dec(region_decode_config(local_peer(pre),
                                    [&](PeerRegionKind, std::string_view, uint64_t,
                                        int64_t) -> Result<std::unique_ptr<PeerRegionView>> {
                                      ++opens;
                                      return Status::Unavailable("no such region here");
                                    }));
  EXPECT_EQ(dec.fetch_and_promote(p), 3);
  EXPECT_EQ(opens, 1);
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_hits, 0);
  EXPECT_EQ(dec.tiers->peer_stats()->num_bad, 0);
  // The shared-memory opener refuses a name it could not have made, and a region of another id.
  EXPECT_FALSE(open_shm_peer_region("/etc/passwd", 1, 8192).ok());
  const std::string& name = pre.tiers->peer_slots()->region().handle();
  const uint64_t id = pre.tiers->peer_slots()->region().region_id();
  const int64_t bytes = pre.tiers->peer_slots()->region().size_bytes();
  EXPECT_TRUE(open_shm_peer_region(name, id, bytes).ok());
  EXPECT_FALSE(open_shm_peer_region(name, id + 1, bytes).ok());
  EXPECT_FALSE(open_shm_peer_region(name, id, bytes + 4096).ok());
}

// The prefill instance dies after answering the records and before confirming them (the
// confirmation's own connection finds it gone): the blocks copied into the pool may not be
// trusted, so they are misses (recomputed); nothing stays pinned, no pool block leaks.
TEST(KvTiersPeerTest, APrefillInstanceDyingBeforeTheConfirmationIsAMiss) {
  Instance pre(region_prefill_config());
  const std::vector<int32_t> p = prompt(100, 3);
  prefill(pre, p);
  std::atomic<bool> dead = false;  // (each source connects on its own thread)
  Instance dec(region_decode_config([&]() -> Result<std::unique_ptr<PeerClient>> {
    if (dead.exchange(true)) return Status::Unavailable("connection refused");
    return std::unique_ptr<PeerClient>(
        new DyingPeer(*pre.tiers->outbox(), 1, pre.tiers->peer_slots()));
  }));
  EXPECT_EQ(dec.fetch_and_promote(p), 0);
  EXPECT_EQ(dec.tiers->peer_stats()->num_slot_hits, 0);
  EXPECT_EQ(dec.tiers->peer_stats()->num_errors, 1);
}

// A prefill instance killed (SIGKILL) leaves its region's name under /dev/shm; the next region
// made on the machine unlinks it, and never a live process's.
TEST(KvTiersPeerTest, AKilledOwnersSharedRegionIsUnlinkedByTheNextOne) {
  pid_t dead = 0;
  for (pid_t p = 4194000; p > 4000000; --p) {
    if (::kill(p, 0) != 0 && errno == ESRCH) {
      dead = p;
      break;
    }
  }
  ASSERT_NE(dead, 0);
  const std::string orphan = "/strata-kv-" + std::to_string(dead) + "-00000000000000aa";
  const std::string live = "/strata-kv-" + std::to_string(::getpid()) + "-00000000000000bb";
  for (const std::string& name : {orphan, live}) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  Result<std::unique_ptr<PeerRegion>> region = create_shm_peer_region(2 * kPeerRegionHeaderBytes);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  EXPECT_LT(::shm_open(orphan.c_str(), O_RDONLY, 0), 0) << "the orphan is gone";
  const int fd = ::shm_open(live.c_str(), O_RDONLY, 0);
  EXPECT_GE(fd, 0) << "a live process's name stays";
  if (fd >= 0) ::close(fd);
  ::shm_unlink(live.c_str());
  ::shm_unlink(orphan.c_str());
}

}  // namespace
}  // namespace strata::kv

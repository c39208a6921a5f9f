// The remote KV tier over three independent redis-servers the test starts (docs/kv.md, "The
// remote tier"): rendezvous placement (the same whatever the servers' order, about 1/N of the
// keys moving when a server is added, and only to it), blocks spread over every server and all
// read back, and one server killed failing only its own blocks while the others still answer
// and are still written; restarted, it is found and written again. Over four servers, whose round
// trips run at the same time, many keys' values each come back under their own key, once, to
// callbacks that never overlap, and a killed server fails exactly its own keys.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_hash.h"
#include "kv/redis_client.h"
#include "kv/redis_shards.h"
#include "kv/remote_tier.h"
#include "kv/tier_key.h"
#include "tests/kv/redis_server.h"

namespace strata::kv {
namespace {

using namespace std::chrono_literals;

constexpr int32_t kBs = 4;
constexpr int64_t kBlockBytes = 128;
constexpr int32_t kNumBlocks = 60;

std::vector<RedisEndpoint> named(int first_port, int n) {
  std::vector<RedisEndpoint> out;
  for (int i = 0; i < n; ++i) out.push_back(RedisEndpoint{"10.0.0.1", first_port + i, 0});
  return out;
}

std::string key_of(int i) { return "strata:kv:0123456789abcdef:" + std::to_string(i * 7919); }

TEST(RedisShardsPlacementTest, EveryListingOfTheSameServersPlacesAKeyOnTheSameServer) {
  const std::vector<RedisEndpoint> servers = named(7000, 3);
  const std::vector<RedisEndpoint> reversed(servers.rbegin(), servers.rend());
  const RedisShards a(servers), b(servers), c(reversed);
  std::vector<int> per_server(3, 0);
  for (int i = 0; i < 3000; ++i) {
    const std::string k = key_of(i);
    const size_t s = a.server_of(k);
    EXPECT_EQ(b.server_of(k), s);
    EXPECT_EQ(c.server(c.server_of(k)).endpoint().port, a.server(s).endpoint().port) << k;
    ++per_server[s];
  }
  for (const int n : per_server) EXPECT_NEAR(n, 1000, 150) << "an even share";
}

TEST(RedisShardsPlacementTest, AddingAServerMovesAboutOneNthOfTheKeysAllToIt) {
  const RedisShards three(named(7000, 3)), four(named(7000, 4));
  int moved = 0;
  constexpr int kKeys = 4000;
  for (int i = 0; i < kKeys; ++i) {
    const std::string k = key_of(i);
    const size_t before = three.server_of(k), after = four.server_of(k);
    if (before == after) continue;
    ++moved;
    EXPECT_EQ(after, 3u) << "a key moves to the new server only";
  }
  EXPECT_NEAR(moved, kKeys / 4, kKeys / 20);
}

TEST(RedisShardsPlacementTest, TheDatabaseIsPartOfAServersName) {
  EXPECT_EQ(shard_name(RedisEndpoint{"cache", 6379, 2}), "cache:6379/2");
  std::vector<RedisEndpoint> dbs = {{"cache", 6379, 0}, {"cache", 6379, 1}};
  const RedisShards s(dbs);
  int on_second = 0;
  for (int i = 0; i < 200; ++i) on_second += s.server_of(key_of(i)) == 1 ? 1 : 0;
  EXPECT_GT(on_second, 50);
  EXPECT_LT(on_second, 150);
}

class RedisShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(std::make_unique<test_util::RedisServer>());
      ASSERT_TRUE(servers_.back()->start()) << "redis-server did not start (install_deps.sh)";
    }
    BlockHasher hasher;
    for (int32_t i = 0; i < kNumBlocks; ++i) {
      std::vector<int32_t> t(kBs);
      std::iota(t.begin(), t.end(), i * kBs);
      hashes_.push_back(hasher.hash(i == 0 ? nullptr : &hashes_.back(), t, {}));
      tokens_.push_back(std::move(t));
      std::vector<std::byte> v(kBlockBytes);
      for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::byte>(k * 5 + i * 11);
      bytes_.push_back(std::move(v));
    }
  }

  std::vector<RedisEndpoint> endpoints() const {
    std::vector<RedisEndpoint> out;
    for (const auto& s : servers_) out.push_back(s->endpoint());
    return out;
  }
  std::unique_ptr<RemoteTier> tier(uint64_t ns = 5) const {
    RemoteTierOptions o;
    o.client = RedisClientOptions{.timeout = 150ms, .backoff = 100ms, .max_backoff = 400ms};
    return std::make_unique<RemoteTier>(RedisTarget{endpoints(), false}, ns, kBs, kBlockBytes, o);
  }
  void put_all(RemoteTier& t) const {
    for (int32_t i = 0; i < kNumBlocks; ++i) {
      t.put(hashes_[i], tokens_[i], bytes_[i], tier_checksum(bytes_[i]));
    }
    t.flush();
  }
  // Every block's status (each a chain of its own); a block read fails the test if its bytes
  // differ.
  std::vector<StatusCode> read_all(RemoteTier& t) const {
    std::vector<std::vector<std::byte>> out(kNumBlocks, std::vector<std::byte>(kBlockBytes));
    std::vector<RemoteTier::Get> gets;
    for (int32_t i = 0; i < kNumBlocks; ++i) {
      gets.push_back(RemoteTier::Get{hashes_[i], tokens_[i], out[i], 0, {}, i});
    }
    t.get(gets);
    std::vector<StatusCode> codes;
    for (int32_t i = 0; i < kNumBlocks; ++i) {
      if (gets[i].status.ok()) {
        EXPECT_EQ(out[i], bytes_[i]) << "block " << i;
      }
      codes.push_back(gets[i].status.code());
    }
    return codes;
  }
  int64_t keys_on(size_t server) const {
    RedisClient c(servers_[server]->endpoint());
    const std::string_view args[] = {"DBSIZE"};
    const Result<std::string> n = c.command(args);
    return n.ok() ? std::stoll(*n) : -1;
  }
  // The server the shards place block i on.
  size_t home(const RemoteTier& t, int32_t i) const {
    return RedisShards(endpoints()).server_of(t.key(hashes_[i]));
  }

  std::vector<std::unique_ptr<test_util::RedisServer>> servers_;
  std::vector<BlockHash> hashes_;
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<std::vector<std::byte>> bytes_;
};

TEST_F(RedisShardsTest, BlocksSpreadOverEveryServerEachWhereThePlacementSaysAndAllReadBack) {
  auto t = tier();
  put_all(*t);
  EXPECT_EQ(t->stats().num_writes, kNumBlocks);
  int64_t total = 0;
  for (size_t s = 0; s < servers_.size(); ++s) {
    EXPECT_GT(keys_on(s), 0) << "server " << s;
    total += keys_on(s);
  }
  EXPECT_EQ(total, kNumBlocks) << "each block on one server";
  for (int32_t i = 0; i < kNumBlocks; ++i) {
    RedisClient c(servers_[home(*t, i)]->endpoint());
    const std::string key = t->key(hashes_[i]);
    const std::string_view exists[] = {"EXISTS", key};
    EXPECT_EQ(*c.command(exists), "1") << "block " << i;
  }
  for (const StatusCode c : read_all(*t)) EXPECT_EQ(c, StatusCode::kOk);
  // Another instance with the servers listed the other way round reads them all too.
  std::vector<RedisEndpoint> reversed = endpoints();
  std::reverse(reversed.begin(), reversed.end());
  RemoteTier other(RedisTarget{reversed, false}, /*ns=*/5, kBs, kBlockBytes);
  for (const StatusCode c : read_all(other)) EXPECT_EQ(c, StatusCode::kOk);
  EXPECT_EQ(other.stats().num_hits, kNumBlocks);
}

TEST_F(RedisShardsTest, AKilledServerFailsOnlyItsOwnBlocksAndIsFoundAgainWhenRestarted) {
  auto t = tier();
  put_all(*t);
  servers_[1]->stop();
  std::vector<StatusCode> codes = read_all(*t);
  int32_t on_dead = 0;
  for (int32_t i = 0; i < kNumBlocks; ++i) {
    if (home(*t, i) == 1) {
      ++on_dead;
      EXPECT_EQ(codes[i], StatusCode::kUnavailable) << "block " << i;
    } else {
      EXPECT_EQ(codes[i], StatusCode::kOk) << "block " << i << " on a live server";
    }
  }
  ASSERT_GT(on_dead, 0);
  EXPECT_EQ(t->stats().num_get_errors, 1);
  EXPECT_EQ(t->stats().num_hits, kNumBlocks - on_dead);
  // Writes go on to the live servers; the dead one's fail. (Another namespace: blocks not yet
  // written, placed anew.)
  auto t6 = tier(/*ns=*/6);
  put_all(*t6);
  int32_t on_dead6 = 0;
  for (int32_t i = 0; i < kNumBlocks; ++i) on_dead6 += home(*t6, i) == 1 ? 1 : 0;
  EXPECT_EQ(t6->stats().num_writes, kNumBlocks - on_dead6);
  EXPECT_EQ(t6->stats().num_put_errors, on_dead6);
  EXPECT_EQ(t6->stats().num_dropped, 0);
  // Restarted (empty), server 1 is asked again once its backoff has passed: its blocks miss,
  // are written again, and then hit.
  ASSERT_TRUE(servers_[1]->start());
  std::this_thread::sleep_for(500ms);  // past the longest backoff
  codes = read_all(*t);
  for (int32_t i = 0; i < kNumBlocks; ++i) {
    EXPECT_EQ(codes[i], home(*t, i) == 1 ? StatusCode::kNotFound : StatusCode::kOk) << i;
  }
  put_all(*t);
  if (t->stats().num_writes < kNumBlocks + on_dead) {
    // The writer's connection to server 1 was the killed server's: that write found it closed.
    std::this_thread::sleep_for(500ms);
    put_all(*t);
  }
  EXPECT_EQ(t->stats().num_writes, kNumBlocks + on_dead);
  for (const StatusCode c : read_all(*t)) EXPECT_EQ(c, StatusCode::kOk);
}

// Four servers and RedisShards itself: the servers' round trips run at the same time, so a reply
// handed to the wrong key, lost, given twice or passed to two callbacks at once shows here.
class RedisShardsFanOutTest : public ::testing::Test {
 protected:
  static constexpr int kServers = 4;
  static constexpr int kKeys = 400;

  void SetUp() override {
    for (int i = 0; i < kServers; ++i) {
      servers_.push_back(std::make_unique<test_util::RedisServer>());
      ASSERT_TRUE(servers_.back()->start()) << "redis-server did not start (install_deps.sh)";
      endpoints_.push_back(servers_.back()->endpoint());
    }
    for (int i = 0; i < kKeys; ++i) {
      keys_.push_back(key_of(i));
      // The key, then up to 64 KiB more, so the servers' replies take different times.
      std::string v = keys_.back() + "|";
      const size_t size = v.size() + static_cast<size_t>(i * 7919 % 65536);
      for (size_t k = v.size(); k < size; ++k) {
        v.push_back(static_cast<char>(k * 31 + static_cast<size_t>(i) * 17));
      }
      values_.push_back(std::move(v));
    }
    for (int i = 0; i < kKeys; ++i) pairs_.push_back({keys_[i], values_[i]});
  }
  RedisShards store() const {
    return RedisShards(
        endpoints_, RedisClientOptions{.timeout = 500ms, .backoff = 100ms, .max_backoff = 400ms});
  }

  // Each callback's key index, counted; fails the test if two callbacks ever overlap.
  struct Calls {
    std::vector<int> count = std::vector<int>(kKeys, 0);
    std::atomic<int> inside{0};
    int overlaps = 0;
    void enter() {
      if (inside.fetch_add(1) != 0) ++overlaps;
    }
    void leave() { inside.fetch_sub(1); }
  };

  std::vector<std::unique_ptr<test_util::RedisServer>> servers_;
  std::vector<RedisEndpoint> endpoints_;
  std::vector<std::string> keys_, values_;
  std::vector<RedisKeyValue> pairs_;
};

TEST_F(RedisShardsFanOutTest, EveryServersValuesComeBackUnderTheirOwnKeysOnceWithoutOverlap) {
  RedisShards s = store();
  std::vector<int> per_server(kServers, 0);
  for (const std::string& k : keys_) ++per_server[s.server_of(k)];
  for (const int n : per_server) ASSERT_GT(n, kKeys / 8) << "every server holds a share";

  Calls written;
  ASSERT_TRUE(s.set_nx(pairs_, 0, [&](size_t i, bool w) {
                 written.enter();
                 EXPECT_TRUE(w) << "key " << i;
                 ++written.count.at(i);
                 written.leave();
               }).ok());
  EXPECT_EQ(written.overlaps, 0);
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(written.count[i], 1) << "key " << i;

  for (const size_t chunk : {size_t{1}, size_t{7}, size_t{kKeys}}) {
    Calls read;
    ASSERT_TRUE(s.mget(
                     keys_,
                     [&](size_t i, std::optional<std::string_view> v) {
                       read.enter();
                       ASSERT_TRUE(v.has_value()) << "key " << i;
                       EXPECT_TRUE(*v == values_.at(i)) << "key " << i << ": another key's value";
                       ++read.count.at(i);
                       read.leave();
                     },
                     chunk)
                    .ok());
    EXPECT_EQ(read.overlaps, 0);
    for (int i = 0; i < kKeys; ++i) {
      EXPECT_EQ(read.count[i], 1) << "key " << i << ", chunk " << chunk;
    }
  }

  // SET NX again: every key there, each answered once.
  Calls again;
  ASSERT_TRUE(s.set_nx(pairs_, 0, [&](size_t i, bool w) {
                 EXPECT_FALSE(w) << "key " << i;
                 ++again.count.at(i);
               }).ok());
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(again.count[i], 1) << "key " << i;
}

TEST_F(RedisShardsFanOutTest, AKilledServerFailsExactlyItsOwnKeysTheOthersAllAnswer) {
  RedisShards s = store();
  ASSERT_TRUE(s.set_nx(pairs_, 0, [](size_t, bool) {}).ok());
  constexpr size_t kDead = 2;
  servers_[kDead]->stop();
  for (int round = 0; round < 2; ++round) {  // the failing round trip, then the open breaker
    Calls read;
    const Status st = s.mget(
        keys_,
        [&](size_t i, std::optional<std::string_view> v) {
          read.enter();
          EXPECT_TRUE(v && *v == values_.at(i)) << "key " << i;
          ++read.count.at(i);
          read.leave();
        },
        4);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable);
    EXPECT_EQ(read.overlaps, 0);
    for (int i = 0; i < kKeys; ++i) {
      EXPECT_EQ(read.count[i], s.server_of(keys_[i]) == kDead ? 0 : 1) << "key " << i;
    }
  }
  // Writes: new keys, the dead server's not answered, every other written.
  std::vector<std::string> keys2(kKeys);
  std::vector<RedisKeyValue> pairs2(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    keys2[i] = keys_[i] + ":2";
    pairs2[i] = {keys2[i], values_[i]};
  }
  Calls written;
  const Status st = s.set_nx(pairs2, 0, [&](size_t i, bool w) {
    EXPECT_TRUE(w) << "key " << i;
    ++written.count.at(i);
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(written.count[i], s.server_of(keys2[i]) == kDead ? 0 : 1) << "key " << i;
  }
}

}  // namespace
}  // namespace strata::kv

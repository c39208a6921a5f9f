// The remote tier over a real Redis Cluster of three masters that the test starts
// (redis-server --cluster-enabled yes, then redis-cli --cluster create): hash slots as Redis
// computes them (CLUSTER KEYSLOT), MOVED / ASK replies parsed, blocks spread over every master and
// read back byte for byte, and a reshard of a master's slots (redis-cli --cluster reshard, keys
// migrated) while blocks are being read: every read is the right block or a miss, never another
// block, and once the slots have moved every block reads again through the MOVED replies.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_hash.h"
#include "kv/redis_cluster.h"
#include "kv/remote_tier.h"
#include "kv/tier_key.h"
#include "tests/kv/redis_server.h"

namespace strata::kv {
namespace {

using namespace std::chrono_literals;

constexpr int32_t kBs = 4;
constexpr int64_t kBlockBytes = 512;

std::string shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(RedisClusterSlotsTest, SlotsAreRedisesAndRedirectsParse) {
  EXPECT_EQ(RedisCluster::slot_of("foo"), 12182);  // CLUSTER KEYSLOT foo
  EXPECT_EQ(RedisCluster::slot_of("{user1000}.following"),
            RedisCluster::slot_of("{user1000}.followers"));
  EXPECT_EQ(RedisCluster::slot_of("{user1000}.following"), RedisCluster::slot_of("user1000"));
  EXPECT_NE(RedisCluster::slot_of("{}foo"), RedisCluster::slot_of("foo")) << "an empty tag";
  bool ask = true;
  std::optional<RedisEndpoint> to = redirect_target("MOVED 3999 127.0.0.1:6381", ask);
  ASSERT_TRUE(to.has_value());
  EXPECT_FALSE(ask);
  EXPECT_EQ(to->host, "127.0.0.1");
  EXPECT_EQ(to->port, 6381);
  to = redirect_target("ASK 3999 10.0.0.2:7000", ask);
  ASSERT_TRUE(to.has_value());
  EXPECT_TRUE(ask);
  EXPECT_EQ(to->port, 7000);
  EXPECT_FALSE(redirect_target("WRONGTYPE Operation against a key", ask).has_value());
  EXPECT_FALSE(redirect_target("MOVED 3999 nohostport", ask).has_value());
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      nodes_.push_back(std::make_unique<test_util::RedisServer>(/*cluster=*/true));
      ASSERT_TRUE(nodes_.back()->start()) << "redis-server did not start";
    }
    std::string create = "redis-cli --cluster create";
    for (const auto& n : nodes_) create += " 127.0.0.1:" + std::to_string(n->port());
    create += " --cluster-replicas 0 --cluster-yes 2>&1";
    const std::string out = shell(create);
    ASSERT_NE(out.find("All 16384 slots covered"), std::string::npos) << out;
    for (int i = 0; i < 100 && !ready(); ++i) std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(ready()) << "cluster_state never became ok";
  }

  bool ready() {
    for (const auto& n : nodes_) {
      const std::string info =
          shell("redis-cli -p " + std::to_string(n->port()) + " cluster info 2>/dev/null");
      if (info.find("cluster_state:ok") == std::string::npos) return false;
    }
    return true;
  }
  std::vector<RedisEndpoint> seeds() const {
    std::vector<RedisEndpoint> s;
    for (const auto& n : nodes_) s.push_back(n->endpoint());
    return s;
  }
  std::string id_of(size_t i) {
    std::string id = shell("redis-cli -p " + std::to_string(nodes_[i]->port()) + " cluster myid");
    while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
    return id;
  }
  int64_t keys_on(size_t i) {
    return std::stoll(shell("redis-cli -p " + std::to_string(nodes_[i]->port()) + " dbsize"));
  }

  std::vector<std::unique_ptr<test_util::RedisServer>> nodes_;
};

struct Blocks {
  std::vector<BlockHash> hashes;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::byte>> bytes;
};

Blocks make_blocks(int32_t n) {
  Blocks b;
  BlockHasher hasher;
  for (int32_t i = 0; i < n; ++i) {
    std::vector<int32_t> t(kBs);
    std::iota(t.begin(), t.end(), i * kBs);
    b.hashes.push_back(hasher.hash(i == 0 ? nullptr : &b.hashes.back(), t, {}));
    b.tokens.push_back(std::move(t));
    std::vector<std::byte> v(kBlockBytes);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::byte>(k * 7 + i * 13);
    b.bytes.push_back(std::move(v));
  }
  return b;
}

// Reads every block (each a chain of its own); counts the good ones, and fails on any that came
// back with other bytes.
int32_t read_all(RemoteTier& t, const Blocks& b) {
  std::vector<std::vector<std::byte>> out(b.hashes.size(), std::vector<std::byte>(kBlockBytes));
  std::vector<RemoteTier::Get> gets;
  for (size_t i = 0; i < b.hashes.size(); ++i) {
    gets.push_back(
        RemoteTier::Get{b.hashes[i], b.tokens[i], out[i], 0, {}, static_cast<int32_t>(i)});
  }
  t.get(gets);
  int32_t good = 0;
  for (size_t i = 0; i < gets.size(); ++i) {
    if (!gets[i].status.ok()) continue;
    EXPECT_EQ(out[i], b.bytes[i]) << "block " << i << " came back with other bytes";
    ++good;
  }
  return good;
}

// One test, one cluster (creating one takes seconds of CI): blocks spread over every master and
// come back, then survive a reshard under reads.
TEST_F(RedisClusterTest, BlocksSpreadOverEveryMasterAndSurviveAReshardUnderReads) {
  RemoteTier tier(RedisTarget{seeds(), true}, /*ns=*/3, kBs, kBlockBytes);
  const Blocks b = make_blocks(96);
  for (size_t i = 0; i < b.hashes.size(); ++i) {
    ASSERT_TRUE(tier.put(b.hashes[i], b.tokens[i], b.bytes[i], tier_checksum(b.bytes[i])));
  }
  tier.flush();
  EXPECT_EQ(tier.stats().num_writes, 96);
  for (size_t n = 0; n < nodes_.size(); ++n) EXPECT_GT(keys_on(n), 0) << "master " << n;
  EXPECT_EQ(read_all(tier, b), 96);
  std::atomic<bool> done{false};
  std::atomic<int32_t> rounds{0};
  std::thread reader([&] {
    while (!done.load()) {
      read_all(tier, b);
      ++rounds;
    }
  });
  // Every slot of the first master, with its keys, to the second.
  const std::string out = shell("redis-cli --cluster reshard 127.0.0.1:" +
                                std::to_string(nodes_[0]->port()) + " --cluster-from " + id_of(0) +
                                " --cluster-to " + id_of(1) +
                                " --cluster-slots 16384 --cluster-yes 2>&1");
  done = true;
  reader.join();
  EXPECT_GT(rounds.load(), 0);
  EXPECT_EQ(keys_on(0), 0) << out.substr(out.size() > 2000 ? out.size() - 2000 : 0);
  EXPECT_EQ(read_all(tier, b), 96) << "every block through the moved slots";
}

}  // namespace
}  // namespace strata::kv

// The remote KV tier against a real redis-server started by the test (docs/kv.md, "The remote
// tier"): blocks written and read back byte for byte in one MGET, written once (SET NX), with the
// TTL; a value cut short, with a flipped byte, another block's value or another namespace's
// under the key is a miss counted as bad; a server down at the start, killed or too slow answers
// Unavailable within the timeout, the breaker then keeps calls off the network, and a restarted
// server is found again; a full write queue drops instead of blocking; a borrowed block is
// coded before its tag comes back. Redis URLs.

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_hash.h"
#include "kv/redis_client.h"
#include "kv/remote_tier.h"
#include "kv/tier_key.h"
#include "tests/kv/redis_server.h"
#include "tests/kv/remote_test_blocks.h"

namespace strata::kv {
namespace {

using namespace std::chrono_literals;

constexpr int32_t kBs = 4;
constexpr int64_t kBlockBytes = 256;

using Block = test_util::RemoteTestBlock;
Block block(int32_t seed) { return test_util::remote_test_block(seed, kBs, kBlockBytes); }

RedisClientOptions fast() {
  return RedisClientOptions{.timeout = 150ms, .backoff = 100ms, .max_backoff = 400ms};
}

class RemoteTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.start()) << "redis-server did not start (install_deps.sh)";
  }

  std::unique_ptr<RemoteTier> tier(uint64_t ns = 11, RemoteTierOptions o = {}) {
    o.client = fast();
    return std::make_unique<RemoteTier>(server_.endpoint(), ns, kBs, kBlockBytes, o);
  }
  // Reads blocks through t, each a chain of its own unless one_chain; each Get's status and,
  // for hits, its bytes.
  static std::vector<RemoteTier::Get> read(RemoteTier& t, const std::vector<Block>& blocks,
                                           std::vector<std::vector<std::byte>>& out,
                                           bool one_chain = false) {
    out.assign(blocks.size(), std::vector<std::byte>(kBlockBytes));
    std::vector<RemoteTier::Get> gets;
    for (size_t i = 0; i < blocks.size(); ++i) {
      gets.push_back(RemoteTier::Get{blocks[i].hash,
                                     blocks[i].tokens,
                                     out[i],
                                     0,
                                     {},
                                     one_chain ? 0 : static_cast<int32_t>(i)});
    }
    t.get(gets);
    return gets;
  }
  std::string raw(const std::string& key) {
    RedisClient c(server_.endpoint());
    const std::string_view args[] = {"GET", key};
    return *c.command(args);
  }
  // The SET commands the server has run (SET NX's included).
  int64_t set_calls() { return server_.info_counter("commandstats", "cmdstat_set:calls="); }
  void set_raw(const std::string& key, const std::string& value) {
    RedisClient c(server_.endpoint());
    const std::string_view args[] = {"SET", key, value};
    ASSERT_TRUE(c.command(args).ok());
  }

  test_util::RedisServer server_;
};

TEST_F(RemoteTierTest, BlocksComeBackByteForByteInOneReadAndAbsentOnesAreMisses) {
  auto t = tier();
  const std::vector<Block> blocks = {block(1), block(2), block(3)};
  EXPECT_TRUE(t->put(blocks[0].hash, blocks[0].tokens, blocks[0].bytes, blocks[0].checksum));
  EXPECT_TRUE(t->put(blocks[2].hash, blocks[2].tokens, blocks[2].bytes, blocks[2].checksum));
  t->flush();
  std::vector<std::vector<std::byte>> out;
  const std::vector<RemoteTier::Get> got = read(*t, blocks, out);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status.to_string();
  EXPECT_EQ(out[0], blocks[0].bytes);
  EXPECT_EQ(got[0].checksum, blocks[0].checksum);
  EXPECT_EQ(got[1].status.code(), StatusCode::kNotFound);
  ASSERT_TRUE(got[2].status.ok());
  EXPECT_EQ(out[2], blocks[2].bytes);
  const RemoteTierStats s = t->stats();
  EXPECT_EQ(s.num_writes, 2);
  EXPECT_EQ(s.num_get_blocks, 3);
  EXPECT_EQ(s.num_hits, 2);
  EXPECT_EQ(s.bytes_written, 2 * static_cast<int64_t>(t->value_bytes()));
}

// A chain is read up to its first block the store lacks: the blocks past it are misses that
// cost no bytes (writes dropped under load leave such holes); another chain in the same read is
// read on.
TEST_F(RemoteTierTest, AChainIsReadOnlyUpToItsFirstAbsentBlock) {
  auto t = tier();
  const std::vector<Block> blocks = {block(1), block(2), block(3), block(4)};
  for (const size_t i : {0, 2, 3}) {
    EXPECT_TRUE(t->put(blocks[i].hash, blocks[i].tokens, blocks[i].bytes, blocks[i].checksum));
  }
  t->flush();
  std::vector<std::vector<std::byte>> out;
  const std::vector<RemoteTier::Get> chain = read(*t, {blocks[0], blocks[1], blocks[2]}, out,
                                                  /*one_chain=*/true);
  ASSERT_TRUE(chain[0].status.ok()) << chain[0].status.to_string();
  EXPECT_EQ(out[0], blocks[0].bytes);
  EXPECT_EQ(chain[1].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(chain[2].status.code(), StatusCode::kNotFound) << "there, but past the hole";
  RemoteTierStats s = t->stats();
  EXPECT_EQ(s.num_hits, 1);
  EXPECT_EQ(s.bytes_read, static_cast<int64_t>(t->value_bytes())) << "one value read";

  std::vector<RemoteTier::Get> two(4);
  std::vector<std::vector<std::byte>> buf(4, std::vector<std::byte>(kBlockBytes));
  const int32_t chain_of[] = {0, 0, 1, 1};  // {1, 2} and {3, 4}
  const size_t order[] = {0, 1, 2, 3};
  for (const size_t i : order) {
    two[i] = RemoteTier::Get{blocks[i].hash, blocks[i].tokens, buf[i], 0, {}, chain_of[i]};
  }
  t->get(two);
  EXPECT_TRUE(two[0].status.ok());
  EXPECT_EQ(two[1].status.code(), StatusCode::kNotFound);
  ASSERT_TRUE(two[2].status.ok()) << "the other chain goes on";
  ASSERT_TRUE(two[3].status.ok());
  EXPECT_EQ(buf[3], blocks[3].bytes);
  s = t->stats();
  EXPECT_EQ(s.num_hits, 4);
  EXPECT_EQ(s.bytes_read, 4 * static_cast<int64_t>(t->value_bytes()));
}

// Split-coded values (kv_codec.h): each writer codes its first kCalibrationBlocks blocks with
// their own codebooks, then with the ones their histograms fixed; every block reads back bit for
// bit, in fewer bytes than stored -- a block of another scale than the calibration's too, its
// symbols escapes.
TEST_F(RemoteTierTest, SplitCodedValuesCalibrateAndComeBackBitForBit) {
  constexpr int64_t kBytes = 8192;
  RemoteTierOptions o;
  o.client = fast();
  o.codec = KvCodecPlan{.scheme = KvCodecScheme::kSplit, .segment_bytes = 2048};
  RemoteTier t(server_.endpoint(), 12, kBs, kBytes, o);
  std::vector<Block> blocks;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  const int n = RemoteTier::kCalibrationBlocks + 8;
  for (int b = 0; b < n; ++b) {
    Block k = test_util::remote_test_block(100 + b, kBs, kBytes);
    const float scale = b == n - 1 ? 1e-12F : 1.0F + static_cast<float>(b % 3);
    for (size_t i = 0; i + 1 < k.bytes.size(); i += 2) {
      const float x = normal(rng) * scale;
      const auto v = static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
      std::memcpy(k.bytes.data() + i, &v, 2);
    }
    k.checksum = tier_checksum(k.bytes);
    blocks.push_back(std::move(k));
  }
  for (const Block& b : blocks) {
    ASSERT_TRUE(t.put(b.hash, b.tokens, b.bytes, b.checksum));
    t.flush();  // one block a batch: the calibration sees them in order
  }
  std::vector<std::vector<std::byte>> out(blocks.size(), std::vector<std::byte>(kBytes));
  std::vector<RemoteTier::Get> gets;
  for (size_t i = 0; i < blocks.size(); ++i) {
    gets.push_back(RemoteTier::Get{blocks[i].hash, blocks[i].tokens, out[i], 0, {}});
  }
  t.get(gets);
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_TRUE(gets[i].status.ok()) << i << ": " << gets[i].status.to_string();
    EXPECT_EQ(out[i], blocks[i].bytes) << i;
  }
  const RemoteTierStats s = t.stats();
  EXPECT_EQ(s.num_writes, n);
  EXPECT_LT(static_cast<double>(s.bytes_written),
            0.8 * static_cast<double>(n) * static_cast<double>(t.value_bytes()));
}

TEST_F(RemoteTierTest, ABlockIsWrittenOnceAndTheTtlIsSet) {
  RemoteTierOptions o;
  o.ttl_seconds = 100;
  auto t = tier(11, o);
  const Block b = block(5);
  t->put(b.hash, b.tokens, b.bytes, b.checksum);
  t->put(b.hash, b.tokens, b.bytes, b.checksum);
  t->flush();
  EXPECT_EQ(t->stats().num_writes, 1);
  EXPECT_EQ(t->stats().num_present, 1) << "SET NX found it there";
  RedisClient c(server_.endpoint());
  const std::string key = t->key(b.hash);
  const std::string_view ttl[] = {"TTL", key};
  const int ttl_left = std::stoi(*c.command(ttl));
  EXPECT_GT(ttl_left, 0);
  EXPECT_LE(ttl_left, 100);
}

// A block another instance wrote since this one computed it is neither coded nor sent: the
// writer asks first which keys are there, and SET NX is never issued for them.
TEST_F(RemoteTierTest, ABlockAnotherInstanceWroteIsNotSentAgain) {
  auto first = tier();
  auto second = tier();
  const Block a = block(1), b = block(2);
  first->put(a.hash, a.tokens, a.bytes, a.checksum);
  first->flush();
  const int64_t sets = set_calls();
  ASSERT_GE(sets, 1);
  ASSERT_TRUE(second->put_borrowed(a.hash, a.tokens, a.bytes, a.checksum, 7));
  ASSERT_TRUE(second->put(b.hash, b.tokens, b.bytes, b.checksum));
  second->flush();
  EXPECT_EQ(set_calls(), sets + 1) << "only the block that was not there is sent";
  const RemoteTierStats s = second->stats();
  EXPECT_EQ(s.num_present, 1);
  EXPECT_EQ(s.num_writes, 1);
  EXPECT_EQ(s.bytes_written, static_cast<int64_t>(second->value_bytes()));
  EXPECT_EQ(second->take_released(/*wait=*/true), std::vector<uint64_t>{7})
      << "the borrowed block's tag comes back though it was not coded";
  std::vector<std::vector<std::byte>> out;
  const std::vector<RemoteTier::Get> got = read(*second, {a, b}, out);
  ASSERT_TRUE(got[0].status.ok() && got[1].status.ok());
  EXPECT_EQ(out[0], a.bytes);
  EXPECT_EQ(out[1], b.bytes);
}

TEST_F(RemoteTierTest, AValueThatFailsACheckIsAMissCountedAsBad) {
  auto t = tier();
  const Block a = block(1), b = block(2);
  t->put(a.hash, a.tokens, a.bytes, a.checksum);
  t->put(b.hash, b.tokens, b.bytes, b.checksum);
  t->flush();
  const std::string good = raw(t->key(a.hash));
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x5a;
  const std::string other_block = raw(t->key(b.hash));
  auto foreign = tier(/*ns=*/12);
  const std::string other_ns = foreign->format().encode(a.hash, a.tokens, a.bytes, a.checksum);
  std::vector<int32_t> other_tokens = a.tokens;
  other_tokens[0] += 1;
  const std::string wrong_tokens = t->format().encode(a.hash, other_tokens, a.bytes, a.checksum);
  int64_t bad = 0;
  for (const std::string& value :
       {good.substr(0, good.size() - 1), flipped, other_block, other_ns, wrong_tokens}) {
    set_raw(t->key(a.hash), value);
    std::vector<std::vector<std::byte>> out;
    const std::vector<RemoteTier::Get> got = read(*t, {a}, out);
    EXPECT_EQ(got[0].status.code(), StatusCode::kNotFound) << got[0].status.to_string();
    EXPECT_EQ(t->stats().num_bad, ++bad);
  }
  set_raw(t->key(a.hash), good);
  std::vector<std::vector<std::byte>> out;
  EXPECT_TRUE(read(*t, {a}, out)[0].status.ok()) << "the good value still reads";
}

TEST_F(RemoteTierTest, ADeadServerFailsFastAndARestartedOneIsFoundAgain) {
  auto t = tier();
  const Block a = block(1);
  server_.stop();
  std::vector<std::vector<std::byte>> out;
  EXPECT_EQ(read(*t, {a}, out)[0].status.code(), StatusCode::kUnavailable);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(read(*t, {a}, out)[0].status.code(), StatusCode::kUnavailable);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s)
      << "the breaker keeps calls off the network";
  t->put(a.hash, a.tokens, a.bytes, a.checksum);
  t->flush();
  EXPECT_EQ(t->stats().num_writes, 0);
  ASSERT_TRUE(server_.start());
  std::this_thread::sleep_for(500ms);  // past the longest backoff
  EXPECT_EQ(read(*t, {a}, out)[0].status.code(), StatusCode::kNotFound) << "answering again";
  t->put(a.hash, a.tokens, a.bytes, a.checksum);
  t->flush();
  if (t->stats().num_writes == 0) {  // the writer's breaker may still have been waiting
    std::this_thread::sleep_for(500ms);
    t->put(a.hash, a.tokens, a.bytes, a.checksum);
    t->flush();
  }
  EXPECT_EQ(t->stats().num_writes, 1);
  EXPECT_TRUE(read(*t, {a}, out)[0].status.ok());
}

TEST_F(RemoteTierTest, AServerKilledMidRunIsUnavailableNotWrong) {
  auto t = tier();
  const Block a = block(1);
  t->put(a.hash, a.tokens, a.bytes, a.checksum);
  t->flush();
  std::vector<std::vector<std::byte>> out;
  ASSERT_TRUE(read(*t, {a}, out)[0].status.ok());
  server_.stop();
  EXPECT_EQ(read(*t, {a}, out)[0].status.code(), StatusCode::kUnavailable);
  EXPECT_GE(t->stats().num_get_errors, 1);
}

TEST_F(RemoteTierTest, ASlowServerIsGivenUpOnAtTheTimeout) {
  auto t = tier();
  const Block a = block(1);
  std::thread sleeper([&] {
    RedisClient c(server_.endpoint(), RedisClientOptions{.timeout = 3000ms});
    const std::string_view args[] = {"DEBUG", "SLEEP", "1"};
    (void)c.command(args);
  });
  std::this_thread::sleep_for(100ms);  // the server is asleep now
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<std::byte>> out;
  EXPECT_EQ(read(*t, {a}, out)[0].status.code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 800ms) << "150 ms timeout, 1 s sleep";
  sleeper.join();
}

TEST_F(RemoteTierTest, AFullWriteQueueDropsInsteadOfBlocking) {
  RemoteTierOptions o;
  o.max_queued_bytes = 10;  // less than one value
  auto t = tier(11, o);
  const Block a = block(1);
  EXPECT_FALSE(t->put(a.hash, a.tokens, a.bytes, a.checksum));
  EXPECT_EQ(t->stats().num_dropped, 1);
}

// put_borrowed queues the caller's bytes without a copy: the writer codes the value from them
// (stored, or split-coded) and hands the tag back before its round trip; what the buffer holds
// after that never reaches Redis. A dropped put borrows nothing: no tag comes back for it.
TEST_F(RemoteTierTest, ABorrowedBlockIsWrittenAsItWasWhenItsTagCameBack) {
  constexpr int64_t kBytes = 4096;
  for (const KvCodecScheme scheme : {KvCodecScheme::kStored, KvCodecScheme::kSplit}) {
    SCOPED_TRACE(static_cast<int>(scheme));
    RemoteTierOptions o;
    o.client = fast();
    o.codec = KvCodecPlan{.scheme = scheme, .segment_bytes = 1024};
    RemoteTier t(server_.endpoint(), 20 + static_cast<uint64_t>(scheme), kBs, kBytes, o);
    Block a = test_util::remote_test_block(7, kBs, kBytes);
    const std::vector<std::byte> want = a.bytes;
    ASSERT_TRUE(t.put_borrowed(a.hash, a.tokens, a.bytes, a.checksum, 42));
    std::vector<uint64_t> released;
    while (released.empty()) released = t.take_released(/*wait=*/true);
    EXPECT_EQ(released, std::vector<uint64_t>{42});
    EXPECT_TRUE(t.take_released(/*wait=*/true).empty());  // none borrowed: returns at once
    std::fill(a.bytes.begin(), a.bytes.end(), std::byte{0x55});  // the slot reused
    t.flush();
    std::vector<std::byte> out(kBytes);
    RemoteTier::Get g{a.hash, a.tokens, out, 0, {}};
    t.get(std::span(&g, 1));
    ASSERT_TRUE(g.status.ok()) << g.status.to_string();
    EXPECT_EQ(out, want);
    EXPECT_EQ(t.stats().num_writes, 1);
  }
  RemoteTierOptions o;
  o.max_queued_bytes = 10;  // less than one value
  auto t = tier(11, o);
  const Block b = block(2);
  EXPECT_FALSE(t->put_borrowed(b.hash, b.tokens, b.bytes, b.checksum, 1));
  EXPECT_TRUE(t->take_released(/*wait=*/true).empty());
  EXPECT_EQ(t->stats().num_dropped, 1);
}

TEST_F(RemoteTierTest, EveryGetAndEveryWriteRoundTripIsTimedAndItsBytesCounted) {
  auto t = tier();
  const std::vector<Block> blocks = {block(1), block(2), block(3)};
  for (const Block& b : blocks) {
    t->put(b.hash, b.tokens, b.bytes, b.checksum);
    t->flush();  // one round trip each
  }
  std::vector<std::vector<std::byte>> out;
  for (int i = 0; i < 4; ++i) read(*t, blocks, out);
  RemoteTierStats s = t->stats();
  EXPECT_EQ(s.put_latency.count(), 3);
  EXPECT_EQ(s.get_latency.count(), 4);
  EXPECT_GT(s.get_latency.sum_seconds(), 0.0);
  EXPECT_LT(s.get_latency.quantile(0.99), 1.0) << "a loopback round trip";
  EXPECT_EQ(s.bytes_written, 3 * static_cast<int64_t>(t->value_bytes()));
  EXPECT_EQ(s.bytes_read, int64_t{4} * 3 * static_cast<int64_t>(t->value_bytes()));
  // A read with no answer is timed too, and a write of a block already there.
  t->put(blocks[0].hash, blocks[0].tokens, blocks[0].bytes, blocks[0].checksum);
  t->flush();
  server_.stop();
  read(*t, blocks, out);
  s = t->stats();
  EXPECT_EQ(s.put_latency.count(), 4);
  EXPECT_EQ(s.get_latency.count(), 5);
  EXPECT_EQ(s.num_get_errors, 1);
  EXPECT_EQ(s.bytes_written, 3 * static_cast<int64_t>(t->value_bytes())) << "SET NX found it";
}

TEST(RedisUrlTest, HostPortAndDatabase) {
  Result<RedisEndpoint> e = parse_redis_url("redis://10.0.0.7:6380/2");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "10.0.0.7");
  EXPECT_EQ(e->port, 6380);
  EXPECT_EQ(e->db, 2);
  e = parse_redis_url("redis://cache");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 6379);
  EXPECT_EQ(e->db, 0);
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:99999",
                          "redis://h:12ab", "redis://h:1/x", "redis://h:1/-1"}) {
    EXPECT_EQ(parse_redis_url(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace strata::kv

// The remote KV tier between two CPU engines (docs/kv.md, "The remote tier"), over a real
// redis-server the test starts: the first engine's blocks reach Redis as they reach its host tier
// (write-through), and a second engine, which never saw the prompt, serves its prefix from Redis
// with the cold run's greedy tokens and top-20 logprobs (the CPU invariance tolerance, 1e-5).
// Another cache salt finds nothing, and a tenant's blocks are shared only by instances with the
// same salt secret; requests queued together share one read. Redis down from the start, killed
// between the engines, asleep past the timeout, missing a block in the middle of the chain, or
// holding a corrupt value leaves the output exactly the cold run's (the prefix recomputed, in
// part or whole), and a restarted Redis is written to again; nothing leaks. A read that would
// end after the prefix could be computed is not waited for unless --kv-remote-read always. Two
// independent servers share the blocks as one does.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "kv/redis_client.h"
#include "model/model.h"
#include "reference_testing.h"
#include "strata/engine.h"
#include "tests/kv/redis_server.h"

namespace strata::engine {
namespace {

using test_util::Collected;

constexpr double kInvarianceTolerance = 1e-5;
const std::string kModelDir = std::string(STRATA_TEST_DATA_DIR) + "/models/llama3-gqa";

class KvRemoteEngineTest : public ::testing::Test {
 protected:
  KvRemoteEngineTest() : pool_(2), model_(model::Model::load({kModelDir})) {
    a_ = test_util::greedy(test_util::fixture_prompt("llama3-gqa"), 12, 20);
  }

  void SetUp() override {
    ASSERT_TRUE(server_.start()) << "redis-server did not start (install_deps.sh)";
  }

  EngineConfig config(const std::string& tenant_secret = "", bool prefetch = true) const {
    EngineConfig c = test_util::sized_for(EngineConfig{}, {a_, a_, a_}, 0);
    c.tenant_salt_secret = tenant_secret;
    c.kv_prefetch = prefetch;
    c.model_dir = kModelDir;
    c.kv_offload_bytes = int64_t{8} << 20;
    c.kv_offload_write_through = true;
    c.kv_remote_urls = {server_.url()};
    // Long enough that a loaded machine (CI, ASan) never drops a write the test counts on; the
    // slow-server test sets its own.
    c.kv_remote_timeout_ms = 2000;
    return c;
  }
  std::unique_ptr<Engine> make(const std::string& tenant_secret = "", bool prefetch = true) {
    return make(config(tenant_secret, prefetch));
  }
  std::unique_ptr<Engine> make(const EngineConfig& c) {
    auto e = engine::create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  Collected cold() {
    EngineConfig c = test_util::sized_for(EngineConfig{}, {a_}, 0);
    c.enable_prefix_caching = false;
    auto e = engine::create_engine(model_, pool_, c);
    EXPECT_TRUE(e.ok());
    return run(**e, a_);
  }
  static Collected run(Engine& e, const EngineRequest& r) {
    auto id = e.submit(r);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return test_util::drain(e)[*id];
  }
  // The first engine computes a (as request r, default a); its blocks reach Redis (the engine's
  // end waits for the writes).
  void first_engine_computes_a(const EngineRequest* r = nullptr,
                               const std::string& tenant_secret = "") {
    std::unique_ptr<Engine> first = make(tenant_secret);
    ASSERT_NE(first, nullptr);
    run(*first, r != nullptr ? *r : a_);
    EXPECT_GT(first->totals().kv_offloaded_blocks, 0);
  }
  static void expect_same(const Collected& got, const Collected& want) {
    ASSERT_EQ(got.tokens.at(0), want.tokens.at(0));
    EXPECT_LT(test_util::max_top_logprobs_rel_err(got.logprobs.at(0), want.logprobs.at(0)),
              kInvarianceTolerance);
  }
  int32_t prefix_tokens() const { return static_cast<int32_t>((a_.prompt.size() - 1) / 16) * 16; }
  std::vector<std::string> keys() { return keys(server_); }
  // The size of a stored value (every block's is the same): STRLEN of one of them.
  int64_t value_bytes() {
    const std::vector<std::string> all = keys();
    if (all.empty()) return -1;
    kv::RedisClient c(server_.endpoint());
    const std::string_view args[] = {"STRLEN", all.front()};
    const Result<std::string> reply = c.command(args);
    return reply.ok() ? std::stoll(*reply) : -1;
  }
  static std::vector<std::string> keys(const kv::test_util::RedisServer& server) {
    kv::RedisClient c(server.endpoint());
    const std::string_view args[] = {"KEYS", "strata:kv:*"};
    Result<std::string> all = c.command(args);
    std::vector<std::string> out;
    if (!all.ok()) return out;
    for (size_t at = 0; at < all->size();) {
      const size_t end = std::min(all->find('\n', at), all->size());
      if (end > at) out.push_back(all->substr(at, end - at));
      at = end + 1;
    }
    return out;
  }

  // Runs a_ on e while Redis is asleep for a second (DEBUG SLEEP): its output, and how long it
  // took.
  std::pair<Collected, std::chrono::steady_clock::duration> run_while_redis_sleeps(Engine& e) {
    std::thread sleeper([this] {
      kv::RedisClient c(server_.endpoint(),
                        kv::RedisClientOptions{.timeout = std::chrono::seconds(5)});
      const std::string_view args[] = {"DEBUG", "SLEEP", "1"};
      (void)c.command(args);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server is asleep now
    const auto start = std::chrono::steady_clock::now();
    Collected got = run(e, a_);
    const auto took = std::chrono::steady_clock::now() - start;
    sleeper.join();
    return {std::move(got), took};
  }

  // Lookups that found their key (INFO stats keyspace_hits; MGET and EXISTS count each key).
  int64_t keyspace_hits() { return server_.info_counter("stats", "keyspace_hits:"); }

  kv::test_util::RedisServer server_;
  ThreadPool pool_;
  model::Model model_;
  EngineRequest a_;
};

TEST_F(KvRemoteEngineTest, ASecondEngineServesTheFirstsPrefixFromRedis) {
  const Collected want = cold();
  first_engine_computes_a();
  EXPECT_GE(static_cast<int32_t>(keys().size()), prefix_tokens() / 16);
  std::unique_ptr<Engine> second = make();
  ASSERT_NE(second, nullptr);
  const Collected got = run(*second, a_);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, prefix_tokens());
  EXPECT_EQ(second->totals().kv_remote_hit_tokens, prefix_tokens());
  EXPECT_EQ(second->totals().kv_tier_faults, 0);
  EXPECT_EQ(second->last_step().num_used_blocks, 0);
}

// With --kv-remote-compress a BF16 cache's blocks go to Redis split-coded (kv/kv_codec.h) and
// come back bit for bit: the second engine's output is the cold BF16 run's, from a full prefix hit, and
// each value is a fifth shorter than without --kv-remote-compress. A flipped byte in a
// compressed value is refused (a bad stream, or the checksum of what it decodes to).
TEST_F(KvRemoteEngineTest, ABf16CacheTravelsCompressedAndComesBackBitForBit) {
  auto bf16 = [&](bool compress) {
    EngineConfig c = config();
    c.kv_cache_dtype = KvCacheDType::kBF16;
    c.kv_remote_compress = compress;
    return c;
  };
  EngineConfig cold_config = test_util::sized_for(EngineConfig{}, {a_}, 0);
  cold_config.enable_prefix_caching = false;
  cold_config.kv_cache_dtype = KvCacheDType::kBF16;
  const Collected want = run(*make(cold_config), a_);
  kv::RedisClient c(server_.endpoint());
  auto value_bytes = [&] {
    int64_t total = 0;
    for (const std::string& key : keys()) {
      const std::string_view strlen[] = {"STRLEN", key};
      total += std::stoll(*c.command(strlen));
    }
    return total;
  };
  run(*make(bf16(false)), a_);
  const int64_t stored = value_bytes();
  const std::string_view flush[] = {"FLUSHALL"};
  ASSERT_TRUE(c.command(flush).ok());
  run(*make(bf16(true)), a_);
  const int64_t compressed = value_bytes();
  EXPECT_GT(stored, 0);
  EXPECT_LT(static_cast<double>(compressed), 0.85 * static_cast<double>(stored));

  std::unique_ptr<Engine> second = make(bf16(true));
  const Collected got = run(*second, a_);
  ASSERT_EQ(got.tokens.at(0), want.tokens.at(0));
  EXPECT_EQ(test_util::max_top_logprobs_rel_err(got.logprobs.at(0), want.logprobs.at(0)), 0.0)
      << "a decoded block differs from the one written";
  EXPECT_EQ(second->totals().kv_remote_hit_tokens, prefix_tokens());

  for (const std::string& key : keys()) {
    const std::string_view get[] = {"GET", key};
    std::string value = *c.command(get);
    value[value.size() * 2 / 3] ^= 0x5a;
    const std::string_view set[] = {"SET", key, value};
    ASSERT_TRUE(c.command(set).ok());
  }
  std::unique_ptr<Engine> third = make(bf16(true));
  const Collected again = run(*third, a_);
  ASSERT_EQ(again.tokens.at(0), want.tokens.at(0));
  EXPECT_EQ(third->totals().kv_remote_hit_tokens, 0);
}

// Requests queued together read Redis together: the first one's read asks for the prefix, the
// others wait on it rather than asking again, and all three get the cold run's output. Redis is
// read when a request is queued whether the disk prefetch is on or not.
TEST_F(KvRemoteEngineTest, QueuedRequestsShareOneReadOfThePrefixEvenWithPrefetchOff) {
  const Collected want = cold();
  first_engine_computes_a();
  const int64_t hits_before = keyspace_hits();
  std::unique_ptr<Engine> second = make("", /*prefetch=*/false);
  ASSERT_NE(second, nullptr);
  std::vector<uint64_t> ids;
  ids.reserve(3);
  for (int i = 0; i < 3; ++i) ids.push_back(*second->submit(a_));
  const std::map<uint64_t, Collected> got = test_util::drain(*second);
  for (const uint64_t id : ids) {
    expect_same(got.at(id), want);
    EXPECT_EQ(got.at(id).metrics.num_cached_tokens, prefix_tokens()) << "request " << id;
  }
  // One read for the three, each block's value read once (the writer's own EXISTS probes count
  // as keyspace hits too, so the bytes tell).
  const EngineTotals t = second->totals();
  EXPECT_EQ(t.kv_remote_get_latency.count(), 1);
  EXPECT_EQ(t.kv_remote_fetched_blocks, prefix_tokens() / 16);
  EXPECT_EQ(t.kv_remote_read_bytes, int64_t{prefix_tokens() / 16} * value_bytes());
  EXPECT_GE(keyspace_hits() - hits_before, 2 * prefix_tokens() / 16);
  EXPECT_EQ(second->last_step().num_used_blocks, 0);
}

TEST_F(KvRemoteEngineTest, AnotherCacheSaltFindsNothing) {
  first_engine_computes_a();
  std::unique_ptr<Engine> second = make();
  ASSERT_NE(second, nullptr);
  EngineRequest salted = a_;
  salted.cache_salt = "another tenant";
  const Collected got = run(*second, salted);
  EXPECT_EQ(got.metrics.num_cached_tokens, 0);
  EXPECT_EQ(second->totals().kv_remote_hit_tokens, 0);
}

// A tenant's salt is derived from the engine's secret (--cache-salt-secret-file): instances with
// the same secret share the tenant's blocks, an instance with another secret (or none: each
// process draws its own) finds nothing.
TEST_F(KvRemoteEngineTest, ATenantSharesAcrossInstancesWithTheSameSecretOnly) {
  EngineRequest tenant_a = a_;
  tenant_a.tenant = "acme";
  first_engine_computes_a(&tenant_a, "the shared secret");
  {
    std::unique_ptr<Engine> same = make("the shared secret");
    ASSERT_NE(same, nullptr);
    EXPECT_EQ(run(*same, tenant_a).metrics.num_cached_tokens, prefix_tokens());
  }
  for (const char* secret : {"another secret", ""}) {
    std::unique_ptr<Engine> other = make(secret);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(run(*other, tenant_a).metrics.num_cached_tokens, 0) << "secret '" << secret << "'";
  }
}

TEST_F(KvRemoteEngineTest, RedisDownFromTheStartLeavesTheColdOutput) {
  const Collected want = cold();
  server_.stop();
  std::unique_ptr<Engine> e = make();
  ASSERT_NE(e, nullptr);
  expect_same(run(*e, a_), want);
  expect_same(run(*e, a_), want);
  EXPECT_EQ(e->totals().kv_remote_written_blocks, 0);
  EXPECT_EQ(e->last_step().num_used_blocks, 0);
}

TEST_F(KvRemoteEngineTest, RedisKilledBetweenTheEnginesLeavesTheColdOutput) {
  const Collected want = cold();
  first_engine_computes_a();
  server_.stop();
  std::unique_ptr<Engine> second = make();
  ASSERT_NE(second, nullptr);
  const Collected got = run(*second, a_);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, 0);
  EXPECT_GE(second->totals().kv_remote_errors, 1);
}

TEST_F(KvRemoteEngineTest, ACorruptValueIsRecomputedWithTheColdOutput) {
  const Collected want = cold();
  first_engine_computes_a();
  kv::RedisClient c(server_.endpoint());
  for (const std::string& key : keys()) {
    const std::string_view get[] = {"GET", key};
    std::string value = *c.command(get);
    value[value.size() / 2] ^= 0x5a;
    const std::string_view set[] = {"SET", key, value};
    ASSERT_TRUE(c.command(set).ok());
  }
  std::unique_ptr<Engine> second = make();
  ASSERT_NE(second, nullptr);
  const Collected got = run(*second, a_);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, 0);
  EXPECT_EQ(second->totals().kv_remote_hit_tokens, 0);
}

// Redis asleep (DEBUG SLEEP) while the second engine reads: the read is given up at the timeout,
// the prefix recomputed, and no step waits on the server for longer.
TEST_F(KvRemoteEngineTest, ASlowRedisIsGivenUpOnAndThePrefixRecomputed) {
  const Collected want = cold();
  first_engine_computes_a();
  EngineConfig c = config();
  c.kv_remote_timeout_ms = 150;
  std::unique_ptr<Engine> second = make(c);
  ASSERT_NE(second, nullptr);
  const auto [got, took] = run_while_redis_sleeps(*second);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, 0);
  EXPECT_GE(second->totals().kv_remote_errors, 1);
  EXPECT_LT(took, std::chrono::milliseconds(800)) << "150 ms timeout, 1 s sleep";
}

// Once an engine has timed its steps and a read, a read that would end after the prefix could be
// computed is not waited for (--kv-remote-read auto): with Redis asleep for a second, the request
// is computed -- the cold output, nothing cached, within the second -- and counted as skipped or
// overdue. With --kv-remote-read always the same request waits out the sleep for its hit.
TEST_F(KvRemoteEngineTest, AReadSlowerThanTheComputeIsNotWaitedForUnlessAlways) {
  const Collected want = cold();
  first_engine_computes_a();
  for (const bool always : {false, true}) {
    SCOPED_TRACE(always ? "always" : "auto");
    EngineConfig c = config();
    c.kv_remote_timeout_ms = 5000;
    c.kv_remote_read_always = always;
    std::unique_ptr<Engine> second = make(c);
    ASSERT_NE(second, nullptr);
    // Another chain from its first block (160 tokens in the vocabulary): a read that finds nothing.
    EngineRequest other = a_;
    for (size_t i = 0; i < 16; ++i) other.prompt[i] = (other.prompt[i] + 1) % 160;
    run(*second, other);  // times a step and a read
    const auto [got, took] = run_while_redis_sleeps(*second);
    expect_same(got, want);
    const EngineTotals t = second->totals();
    if (always) {
      EXPECT_EQ(got.metrics.num_cached_tokens, prefix_tokens());
      EXPECT_GT(took, std::chrono::milliseconds(500)) << "the read waited out the sleep";
      EXPECT_EQ(t.kv_remote_skipped_blocks + t.kv_remote_overdue_requests, 0);
    } else {
      EXPECT_EQ(got.metrics.num_cached_tokens, 0);
      EXPECT_LT(took, std::chrono::milliseconds(800)) << "1 s sleep, not waited for";
      EXPECT_GT(t.kv_remote_skipped_blocks + t.kv_remote_overdue_requests, 0);
    }
    EXPECT_EQ(t.kv_tier_faults, 0);
    EXPECT_EQ(second->last_step().num_used_blocks, 0);
  }
}

// A block gone from the middle of the chain (evicted by Redis, or deleted): the blocks before it
// are served, the rest recomputed, the output the cold run's.
TEST_F(KvRemoteEngineTest, ABlockEvictedFromTheMiddleEndsTheHitThere) {
  const Collected want = cold();
  first_engine_computes_a();
  const int32_t blocks = prefix_tokens() / 16;
  ASSERT_GE(blocks, 2);
  // Which key is which block: the engine's namespace is in the key, the chain hash is not
  // computable here, so the values' token ids tell (each value holds its block's 16 token ids
  // after the 72-byte header).
  kv::RedisClient c(server_.endpoint());
  std::string victim;
  const int32_t middle = blocks / 2;
  for (const std::string& key : keys()) {
    const std::string_view get[] = {"GET", key};
    const std::string value = *c.command(get);
    int32_t first_token = 0;
    std::memcpy(&first_token, value.data() + 72, sizeof(first_token));
    if (first_token == a_.prompt[static_cast<size_t>(middle) * 16]) victim = key;
  }
  ASSERT_FALSE(victim.empty());
  const std::string_view del[] = {"DEL", victim};
  ASSERT_TRUE(c.command(del).ok());
  std::unique_ptr<Engine> second = make();
  ASSERT_NE(second, nullptr);
  const Collected got = run(*second, a_);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, middle * 16);
  EXPECT_EQ(second->totals().kv_remote_hit_tokens, middle * 16);
}

// Redis killed, then restarted empty: the engine serves meanwhile, and once its breaker lets it
// try again it reconnects and writes blocks there again.
TEST_F(KvRemoteEngineTest, ARestartedRedisIsFoundAgainAndWrittenTo) {
  const Collected want = cold();
  std::unique_ptr<Engine> e = make();
  ASSERT_NE(e, nullptr);
  server_.stop();
  expect_same(run(*e, a_), want);
  EXPECT_EQ(e->totals().kv_remote_written_blocks, 0);
  ASSERT_TRUE(server_.start());
  // Each request under a salt of its own has blocks of its own to write; the first writes may
  // still meet the breaker's backoff (250 ms, doubled on each failure while the server was down).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int i = 0;
       e->totals().kv_remote_written_blocks == 0 && std::chrono::steady_clock::now() < deadline;
       ++i) {
    EngineRequest salted = a_;
    salted.cache_salt = "after the restart " + std::to_string(i);
    run(*e, salted);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(e->totals().kv_remote_written_blocks, 0);
  EXPECT_FALSE(keys().empty());
}

// Two independent Redis servers (no cluster): the first engine's blocks spread over them, and a
// second engine with the same two servers (listed the other way round) serves the prefix from
// them; the bytes and the read's round trips reach the engine's totals.
TEST_F(KvRemoteEngineTest, TwoEnginesSharingTwoShardsServeTheSamePrefix) {
  kv::test_util::RedisServer other;
  ASSERT_TRUE(other.start());
  const Collected want = cold();
  EngineConfig c = config();
  c.kv_remote_urls = {server_.url(), other.url()};
  {
    std::unique_ptr<Engine> first = make(c);
    ASSERT_NE(first, nullptr);
    run(*first, a_);
  }  // its end waits for the writes
  const size_t on_first = keys(server_).size(), on_other = keys(other).size();
  EXPECT_GE(static_cast<int32_t>(on_first + on_other), prefix_tokens() / 16);
  EXPECT_GT(on_first, 0u);
  EXPECT_GT(on_other, 0u);
  c.kv_remote_urls = {other.url(), server_.url()};
  std::unique_ptr<Engine> second = make(c);
  ASSERT_NE(second, nullptr);
  const Collected got = run(*second, a_);
  expect_same(got, want);
  EXPECT_EQ(got.metrics.num_cached_tokens, prefix_tokens());
  const EngineTotals t = second->totals();
  EXPECT_EQ(t.kv_remote_hit_tokens, prefix_tokens());
  EXPECT_GT(t.kv_remote_read_bytes, 0);
  EXPECT_GE(t.kv_remote_get_latency.count(), 1);
  EXPECT_EQ(t.kv_remote_errors, 0);
  EXPECT_EQ(second->last_step().num_used_blocks, 0);
}

TEST_F(KvRemoteEngineTest, AServerNamedTwiceIsRefused) {
  EngineConfig c = config();
  c.kv_remote_urls = {server_.url(), "redis://127.0.0.1:" + std::to_string(server_.port()) + "/0"};
  auto e = engine::create_engine(model_, pool_, c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("named twice"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace strata::engine

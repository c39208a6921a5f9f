// The router's pure parts: the --backend syntax, KV event decoding (against the publisher's own
// encoder), the prefix index fed by events, and the routing policies' decisions.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "kv/kv_event_wire.h"
#include "router/backend_spec.h"
#include "router/kv_event_decode.h"
#include "router/prefix_index.h"
#include "router/routing_policy.h"

namespace strata::router {
namespace {

TEST(BackendSpecTest, ParsesAddressEventsAndReplay) {
  const Result<BackendSpec> a = parse_backend_spec("http://127.0.0.1:8001/");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a.value(), (BackendSpec{"http://127.0.0.1:8001", "", ""}));
  const Result<BackendSpec> b =
      parse_backend_spec("http://h:1,events=tcp://h:5557,replay=tcp://h:5558");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value(), (BackendSpec{"http://h:1", "tcp://h:5557", "tcp://h:5558"}));
  EXPECT_TRUE(parse_backend_spec("http://[::1]:80,events=ipc:///tmp/e").ok());
}

TEST(BackendSpecTest, RefusesWhatIsNotTheSyntax) {
  for (const char* bad :
       {"", "h:1", "https://h:1", "http://h", "http://h:0", "http://h:70000", "http://h:1/v1",
        "http://:1", "http://h:1,", "http://h:1,events", "http://h:1,foo=tcp://h:2",
        "http://h:1,events=http://h:2", "http://h:1,replay=tcp://h:2",
        "http://h:1,events=tcp://h:2,events=tcp://h:3", "http://h:1,events=tcp://h",
        "http://h:1,events=tcp://*:5557"}) {
    const Result<BackendSpec> r = parse_backend_spec(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

kv::WireKvEventBatch stored(const std::vector<uint64_t>& hashes, int32_t block_size = 2) {
  kv::WireKvEventBatch b;
  b.ts = 1.5;
  std::optional<uint64_t> parent;
  std::vector<int32_t> tokens(static_cast<size_t>(block_size));
  for (const uint64_t h : hashes) {
    b.add_stored(h, parent, tokens.data(), block_size);
    parent = h;
  }
  return b;
}

TEST(KvEventDecodeTest, DecodesWhatThePublisherEncodes) {
  kv::WireKvEventBatch b = stored({1, 0x8000000000000001ull});
  b.add_removed(5);
  b.add_all_cleared();
  const Result<kv::WireKvEventBatch> d = decode_kv_event_batch(encode_kv_event_batch(b));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_DOUBLE_EQ(d.value().ts, 1.5);
  ASSERT_EQ(d.value().events.size(), 3u);
  const auto& s = std::get<kv::WireBlockStored>(d.value().events[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{1, 0x8000000000000001ull}));
  EXPECT_FALSE(s.parent_block_hash.has_value());
  EXPECT_EQ(s.block_size, 2);
  EXPECT_EQ(s.token_ids.size(), 4u);
  EXPECT_EQ(std::get<kv::WireBlockRemoved>(d.value().events[1]).block_hashes,
            std::vector<uint64_t>{5});
  EXPECT_TRUE(std::holds_alternative<kv::WireAllBlocksCleared>(d.value().events[2]));
}

TEST(KvEventDecodeTest, RefusesOtherShapes) {
  EXPECT_FALSE(decode_kv_event_batch("").ok());
  EXPECT_FALSE(decode_kv_event_batch("\x92\xcb").ok());      // truncated
  EXPECT_FALSE(decode_kv_event_batch("\x91\x01").ok());      // one element
  EXPECT_FALSE(decode_kv_event_batch("\x92\x01\x01").ok());  // events not an array
  // A stored event whose tokens are not block_size per block.
  EXPECT_FALSE(decode_kv_event_batch("\x92\x01\x91\x97\xab"
                                     "BlockStored\x91\x01\xc0\x91\x01\x02\xc0\xa3"
                                     "CPU")
                   .ok());
  // An unknown event kind is skipped, not an error.
  const Result<kv::WireKvEventBatch> d = decode_kv_event_batch("\x92\x01\x91\x91\xa3New");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d.value().events.empty());
}

TEST(PrefixIndexTest, MatchesTheLongestLeadingRun) {
  PrefixIndex index;
  EXPECT_EQ(index.block_size(), 0);
  index.apply(stored({10, 11, 12}, 16));
  EXPECT_EQ(index.block_size(), 16);
  EXPECT_EQ(index.num_blocks(), 3u);
  EXPECT_EQ(index.match(std::vector<uint64_t>{10, 11, 12, 13}).blocks(), 3);
  EXPECT_EQ(index.match(std::vector<uint64_t>{10, 99, 12}).blocks(), 1);
  EXPECT_EQ(index.match(std::vector<uint64_t>{}).blocks(), 0);
}

TEST(PrefixIndexTest, EvictionCorrectsTheIndex) {
  PrefixIndex index;
  index.apply(stored({10, 11, 12}));
  kv::WireKvEventBatch removed;
  removed.add_removed(11);
  index.apply(removed);
  EXPECT_EQ(index.match(std::vector<uint64_t>{10, 11, 12}).blocks(), 1);
  EXPECT_EQ(index.num_blocks(), 2u);
  kv::WireKvEventBatch cleared;
  cleared.add_all_cleared();
  index.apply(cleared);
  EXPECT_EQ(index.match(std::vector<uint64_t>{10}).blocks(), 0);
  EXPECT_EQ(index.num_blocks(), 0u);
  index.apply(stored({10}));
  index.clear();
  EXPECT_EQ(index.num_blocks(), 0u);
}

TEST(KvEventDecodeTest, ReadsEachEventsMedium) {
  kv::WireKvEventBatch b = stored({1});
  b.add_tier_stored(kv::KvMedium::kHost, 2, 2);
  b.add_tier_stored(kv::KvMedium::kDisk, 3, 2);
  b.add_removed(4, kv::KvMedium::kDisk);
  const Result<kv::WireKvEventBatch> d = decode_kv_event_batch(encode_kv_event_batch(b));
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d.value().events.size(), 4u);
  EXPECT_EQ(std::get<kv::WireBlockStored>(d.value().events[0]).medium, kv::KvMedium::kDevice);
  const auto& host = std::get<kv::WireBlockStored>(d.value().events[1]);
  EXPECT_EQ(host.medium, kv::KvMedium::kHost);
  EXPECT_TRUE(host.token_ids.empty()) << "a tier's blocks come without tokens";
  EXPECT_EQ(std::get<kv::WireBlockStored>(d.value().events[2]).medium, kv::KvMedium::kDisk);
  EXPECT_EQ(std::get<kv::WireBlockRemoved>(d.value().events[3]).medium, kv::KvMedium::kDisk);
  // A nil medium (vLLM before 0.10.2) is the pool's; a medium Strata does not know is skipped.
  const Result<kv::WireKvEventBatch> nil =
      decode_kv_event_batch("\x92\x01\x92\x93\xac"
                            "BlockRemoved\x91\x05\xc0\x93\xac"
                            "BlockRemoved\x91\x06\xa3"
                            "NPU");
  ASSERT_TRUE(nil.ok()) << nil.status().message();
  ASSERT_EQ(nil.value().events.size(), 1u);
  EXPECT_EQ(std::get<kv::WireBlockRemoved>(nil.value().events[0]).medium, kv::KvMedium::kDevice);
  EXPECT_EQ(std::get<kv::WireBlockRemoved>(nil.value().events[0]).block_hashes,
            std::vector<uint64_t>{5});
}

TEST(PrefixIndexTest, KeepsEachBlocksMediaAndCountsTheBestOne) {
  PrefixIndex index;
  index.apply(stored({10, 11}));  // in the pool
  kv::WireKvEventBatch tiers;
  tiers.add_tier_stored(kv::KvMedium::kHost, 11, 2);  // written through: pool and host
  tiers.add_tier_stored(kv::KvMedium::kHost, 12, 2);
  tiers.add_tier_stored(kv::KvMedium::kDisk, 13, 2);
  tiers.add_tier_stored(kv::KvMedium::kRemote, 14, 2);  // every instance of the pool reads it
  index.apply(tiers);
  PrefixMatch m = index.match(std::vector<uint64_t>{10, 11, 12, 13, 14});
  EXPECT_EQ(m.device, 2);
  EXPECT_EQ(m.host, 1);
  EXPECT_EQ(m.disk, 1);
  EXPECT_EQ(m.blocks(), 4) << "the remote medium is not the instance's own";
  EXPECT_EQ(index.num_blocks(kv::KvMedium::kDevice), 2u);
  EXPECT_EQ(index.num_blocks(kv::KvMedium::kHost), 2u);
  EXPECT_EQ(index.num_blocks(kv::KvMedium::kDisk), 1u);
  EXPECT_EQ(index.num_blocks(kv::KvMedium::kRemote), 0u);
  // Evicted from the pool, 11 is still on the host tier: the run goes on.
  kv::WireKvEventBatch evicted;
  evicted.add_removed(11);
  index.apply(evicted);
  m = index.match(std::vector<uint64_t>{10, 11, 12});
  EXPECT_EQ(m.device, 1);
  EXPECT_EQ(m.host, 2);
  // The pool's reset leaves the tiers' blocks.
  kv::WireKvEventBatch cleared;
  cleared.add_all_cleared();
  index.apply(cleared);
  EXPECT_EQ(index.num_blocks(kv::KvMedium::kDevice), 0u);
  m = index.match(std::vector<uint64_t>{10, 11, 12});
  EXPECT_EQ(m.blocks(), 0) << "10 was only in the pool";
  m = index.match(std::vector<uint64_t>{11, 12, 13});
  EXPECT_EQ(m.host, 2);
  EXPECT_EQ(m.disk, 1);
  // A host block dropped: gone from the index once no medium holds it.
  kv::WireKvEventBatch dropped;
  dropped.add_removed(12, kv::KvMedium::kHost);
  index.apply(dropped);
  EXPECT_EQ(index.match(std::vector<uint64_t>{11, 12}).blocks(), 1);
  EXPECT_EQ(index.num_blocks(kv::KvMedium::kHost), 1u);
}

std::vector<InstanceView> views(std::vector<int32_t> matched, std::vector<int64_t> in_flight) {
  std::vector<InstanceView> v(matched.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i].matched_blocks = matched[i];
    v[i].in_flight = in_flight[i];
  }
  return v;
}

TEST(RoutingPolicyTest, RoundRobinTakesTurnsAndSkipsUnhealthy) {
  std::vector<InstanceView> v = views({0, 0, 0}, {5, 0, 0});
  v[1].healthy = false;
  std::vector<size_t> got;
  for (uint64_t t = 0; t < 4; ++t)
    got.push_back(choose_instance(Policy::kRoundRobin, v, t, 1.5)->instance);
  EXPECT_EQ(got, (std::vector<size_t>{0, 2, 2, 0}));
  for (InstanceView& x : v) x.healthy = false;
  EXPECT_FALSE(choose_instance(Policy::kRoundRobin, v, 0, 1.5).has_value());
}

TEST(RoutingPolicyTest, LeastLoadBreaksTiesByReportedLoad) {
  std::vector<InstanceView> v = views({0, 0, 0}, {2, 1, 1});
  v[1].reported_load = 7;
  v[2].reported_load = 3;
  const std::optional<Choice> c = choose_instance(Policy::kLeastLoad, v, 0, 1.5);
  EXPECT_EQ(c->instance, 2u);
  EXPECT_EQ(c->decision, Decision::kLeastLoad);
}

TEST(RoutingPolicyTest, PrefixPicksTheLongestCachedPrefix) {
  const std::vector<InstanceView> v = views({3, 8, 5, 0}, {1, 1, 0, 0});
  const std::optional<Choice> c = choose_instance(Policy::kPrefix, v, 0, 1.5);
  EXPECT_EQ(c->instance, 1u);
  EXPECT_EQ(c->decision, Decision::kPrefixMatch);
}

TEST(RoutingPolicyTest, PrefixWeighsTierBlocksBelowPoolBlocks) {
  // Equal runs: the pool's wins over the host tier's, which wins over the disk's.
  std::vector<InstanceView> v = views({0, 0, 4}, {0, 0, 0});
  v[0].matched_disk_blocks = 4;
  v[1].matched_host_blocks = 4;
  EXPECT_EQ(choose_instance(Policy::kPrefix, v, 0, 1.5)->instance, 2u);
  v[2].matched_blocks = 0;
  EXPECT_EQ(choose_instance(Policy::kPrefix, v, 0, 1.5)->instance, 1u);
  // A prefix on the host tier beats none at all, and counts as a match.
  v = views({0, 0}, {0, 0});
  v[1].matched_host_blocks = 1;
  const std::optional<Choice> c = choose_instance(Policy::kPrefix, v, 0, 1.5);
  EXPECT_EQ(c->instance, 1u);
  EXPECT_EQ(c->decision, Decision::kPrefixMatch);
  // A host run well longer than a pool run wins; one a block longer does not.
  v = views({5, 0}, {0, 0});
  v[1].matched_host_blocks = 8;  // 6.4 > 5
  EXPECT_EQ(choose_instance(Policy::kPrefix, v, 0, 1.5)->instance, 1u);
  v[1].matched_host_blocks = 6;  // 4.8 < 5
  EXPECT_EQ(choose_instance(Policy::kPrefix, v, 0, 1.5)->instance, 0u);
  // Pool blocks then host blocks of one run add up.
  v[1].matched_blocks = 4;
  v[1].matched_host_blocks = 2;  // 5.6 > 5
  EXPECT_EQ(choose_instance(Policy::kPrefix, v, 0, 1.5)->instance, 1u);
}

TEST(RoutingPolicyTest, PrefixTiesGoToTheLeastLoaded) {
  const std::vector<InstanceView> v = views({4, 4, 0}, {2, 1, 0});
  const std::optional<Choice> c = choose_instance(Policy::kPrefix, v, 0, 1.5);
  EXPECT_EQ(c->instance, 1u);
}

TEST(RoutingPolicyTest, PrefixWithoutAnyMatchIsLeastLoad) {
  const std::vector<InstanceView> v = views({0, 0, 0}, {2, 0, 1});
  const std::optional<Choice> c = choose_instance(Policy::kPrefix, v, 0, 1.5);
  EXPECT_EQ(c->instance, 1u);
  EXPECT_EQ(c->decision, Decision::kPrefixNoMatch);
}

TEST(RoutingPolicyTest, PrefixSkipsAnUnhealthyInstance) {
  std::vector<InstanceView> v = views({9, 2, 0}, {0, 0, 0});
  v[0].healthy = false;
  EXPECT_EQ(choose_instance(Policy::kPrefix, v, 0, 1.5)->instance, 1u);
}

// A hot prefix cached on one instance: it takes the prefix's requests until it holds more than
// balance_factor x the mean + 1 in flight; then the least loaded takes them, so no instance
// runs away with the load.
TEST(RoutingPolicyTest, HotPrefixIsBoundedByTheBalanceFactor) {
  std::vector<InstanceView> v = views({6, 0, 0, 0}, {0, 0, 0, 0});
  std::vector<int> routed(4, 0);
  for (uint64_t t = 0; t < 40; ++t) {
    const std::optional<Choice> c = choose_instance(Policy::kPrefix, v, t, 1.5);
    ASSERT_TRUE(c.has_value());
    ++routed[c->instance];
    ++v[c->instance].in_flight;  // none finishes: the worst case for the bound
    int64_t total = 0;
    int64_t most = 0;
    for (const InstanceView& x : v) {
      total += x.in_flight;
      most = std::max(most, x.in_flight);
    }
    const double mean = static_cast<double>(total) / 4.0;
    EXPECT_LE(static_cast<double>(most), 1.5 * mean + 1.0) << "after " << t + 1;
  }
  EXPECT_GT(routed[0], routed[1]);  // the prefix's instance still gets the most
  // One request at a time (each finishes before the next): all to the prefix's instance.
  v = views({6, 0, 0, 0}, {0, 0, 0, 0});
  for (uint64_t t = 0; t < 10; ++t) {
    const std::optional<Choice> c = choose_instance(Policy::kPrefix, v, t, 1.5);
    EXPECT_EQ(c->instance, 0u);
    EXPECT_EQ(c->decision, Decision::kPrefixMatch);
  }
}

TEST(RoutingPolicyTest, NamesRoundTrip) {
  for (const Policy p : {Policy::kPrefix, Policy::kLeastLoad, Policy::kRoundRobin}) {
    EXPECT_EQ(policy_from_name(policy_name(p)), p);
  }
  EXPECT_FALSE(policy_from_name("random").has_value());
}

}  // namespace
}  // namespace strata::router

// KV events in vLLM's wire format: the msgpack encoding byte for byte, and the ZeroMQ publisher
// against a real SUB and DEALER (sequence framing, replay and its end marker, drops when the
// queue is full, shutdown without subscribers).

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_event_publisher.h"
#include "kv/kv_event_wire.h"

namespace strata::kv {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

void append(Bytes& b, std::initializer_list<int> v) {
  for (const int x : v) b.push_back(static_cast<uint8_t>(x));
}

void append_str(Bytes& b, const std::string& s) {
  b.push_back(static_cast<uint8_t>(0xa0 | s.size()));  // fixstr: every string here is < 32 bytes
  b.insert(b.end(), s.begin(), s.end());
}

WireKvEventBatch known_batch() {
  WireKvEventBatch batch;
  batch.ts = 1.5;
  const int32_t tokens[4] = {1, 2, 300, 70000};
  batch.add_stored(1, std::nullopt, tokens, 2);
  batch.add_stored(0x8000000000000001ULL, 1, tokens + 2, 2);  // continues the chain: one event
  batch.add_removed(5);
  batch.add_all_cleared();
  return batch;
}

TEST(KvEventWireTest, BlockHashIsTheFirstEightBytesBigEndian) {
  BlockHash h;
  for (size_t i = 0; i < h.bytes.size(); ++i) h.bytes[i] = static_cast<uint8_t>(i + 1);
  EXPECT_EQ(wire_block_hash(h), 0x0102030405060708ULL);
  h.bytes[0] = 0xff;
  EXPECT_EQ(wire_block_hash(h), 0xff02030405060708ULL);
}

TEST(KvEventWireTest, KnownBatchEncodesToVllmsExactBytes) {
  Bytes want;
  append(want, {0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0});  // [ts = 1.5 as float64,
  append(want, {0x93});                                      //  [3 events:
  append(want, {0x97});                                      //   BlockStored, 6 fields
  append_str(want, "BlockStored");
  append(want, {0x92, 0x01, 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0x01});  // block_hashes
  append(want, {0xc0});                                            // parent_block_hash: nil
  append(want, {0x94, 0x01, 0x02, 0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70});  // token_ids
  append(want, {0x02, 0xc0});  // block_size, lora_id: nil
  append_str(want, "GPU");     // medium: the pool
  append(want, {0x93});
  append_str(want, "BlockRemoved");
  append(want, {0x91, 0x05});
  append_str(want, "GPU");
  append(want, {0x91});
  append_str(want, "AllBlocksCleared");
  EXPECT_EQ(bytes_of(encode_kv_event_batch(known_batch())), want);
}

// The tiers' blocks in vLLM's offloading form: no parent, no token ids, the tier's medium.
TEST(KvEventWireTest, TierEventsCarryTheirMediumAndNoTokens) {
  WireKvEventBatch batch;
  batch.ts = 1.5;
  batch.add_tier_stored(KvMedium::kHost, 7, 2);
  batch.add_tier_stored(KvMedium::kHost, 9, 2);  // joins: one event per run of a medium
  batch.add_tier_stored(KvMedium::kDisk, 7, 2);
  batch.add_removed(8, KvMedium::kHost);
  batch.add_removed(9, KvMedium::kRemote);  // another medium: another event
  Bytes want;
  append(want, {0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x94, 0x97});
  append_str(want, "BlockStored");
  append(want, {0x92, 0x07, 0x09, 0xc0, 0x90, 0x02, 0xc0});
  append_str(want, "CPU");
  append(want, {0x97});
  append_str(want, "BlockStored");
  append(want, {0x91, 0x07, 0xc0, 0x90, 0x02, 0xc0});
  append_str(want, "Disk");
  append(want, {0x93});
  append_str(want, "BlockRemoved");
  append(want, {0x91, 0x08});
  append_str(want, "CPU");
  append(want, {0x93});
  append_str(want, "BlockRemoved");
  append(want, {0x91, 0x09});
  append_str(want, "Remote");
  EXPECT_EQ(bytes_of(encode_kv_event_batch(batch)), want);
  EXPECT_EQ(batch.num_blocks(), 5);
}

// A whole-second ts is still a float64 (msgspec's ts: float), not the integer msgpack-c's
// pack_double writes for a double that holds one.
TEST(KvEventWireTest, AWholeSecondTsIsStillAFloat64) {
  for (const double ts : {0.0, 2.0, -1.0, 1764979200.0}) {
    WireKvEventBatch batch;
    batch.ts = ts;
    batch.add_removed(5);
    const Bytes got = bytes_of(encode_kv_event_batch(batch));
    ASSERT_GE(got.size(), 10u);
    EXPECT_EQ(got[1], 0xcb) << ts;
    const msgpack::object_handle h =
        msgpack::unpack(reinterpret_cast<const char*>(got.data()), got.size());
    EXPECT_EQ(h.get().via.array.ptr[0].type, msgpack::type::FLOAT64) << ts;
    EXPECT_EQ(h.get().via.array.ptr[0].via.f64, ts);
  }
}

TEST(KvEventWireTest, EncodedBatchDecodesToVllmsSchema) {
  const std::string payload = encode_kv_event_batch(known_batch());
  const msgpack::object_handle handle = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = handle.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 2u) << "no data_parallel_rank when unset";
  EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 1.5);
  const auto events = batch.via.array.ptr[1].as<std::vector<msgpack::object>>();
  ASSERT_EQ(events.size(), 3u);
  const auto stored = events[0].as<std::vector<msgpack::object>>();
  ASSERT_EQ(stored.size(), 7u);
  EXPECT_EQ(stored[0].as<std::string>(), "BlockStored");
  EXPECT_EQ(stored[1].as<std::vector<uint64_t>>(),
            (std::vector<uint64_t>{1, 0x8000000000000001ULL}));
  EXPECT_TRUE(stored[2].is_nil());
  EXPECT_EQ(stored[3].as<std::vector<int64_t>>(), (std::vector<int64_t>{1, 2, 300, 70000}));
  EXPECT_EQ(stored[4].as<int>(), 2);
  EXPECT_TRUE(stored[5].is_nil());
  EXPECT_EQ(stored[6].as<std::string>(), "GPU");
  const auto removed = events[1].as<std::vector<msgpack::object>>();
  ASSERT_EQ(removed.size(), 3u);
  EXPECT_EQ(removed[0].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(removed[1].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{5}));
  EXPECT_EQ(removed[2].as<std::string>(), "GPU");
  const auto cleared = events[2].as<std::vector<msgpack::object>>();
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared[0].as<std::string>(), "AllBlocksCleared");
}

TEST(KvEventWireTest, OnlyAChainContinuationJoinsTheLastStoredEvent) {
  WireKvEventBatch batch;
  const int32_t t[2] = {7, 8};
  batch.add_stored(10, std::nullopt, t, 2);
  batch.add_stored(11, 10, t, 2);            // joins
  batch.add_stored(12, std::nullopt, t, 2);  // another sequence's first block
  batch.add_stored(13, 99, t, 2);            // a parent that is not the last block
  batch.add_removed(10);
  batch.add_removed(11);           // joins
  batch.add_stored(14, 13, t, 2);  // after a removal: a new event
  ASSERT_EQ(batch.events.size(), 5u);
  EXPECT_EQ(std::get<WireBlockStored>(batch.events[0]).block_hashes,
            (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(std::get<WireBlockStored>(batch.events[0]).token_ids.size(), 4u);
  EXPECT_EQ(std::get<WireBlockStored>(batch.events[2]).parent_block_hash, 99u);
  EXPECT_EQ(std::get<WireBlockRemoved>(batch.events[3]).block_hashes,
            (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(batch.num_blocks(), 7);
}

// ---- the publisher -------------------------------------------------------------------------

constexpr int kBs = 4;
constexpr auto kWait = std::chrono::milliseconds(5000);  // bound on every wait for a message

std::unique_ptr<KvEventPublisher> make_publisher(int32_t max_queue = 100,
                                                 int32_t buffer_steps = 100) {
  KvEventPublisherConfig c;
  c.endpoint = "tcp://127.0.0.1:*";
  c.replay_endpoint = "tcp://127.0.0.1:*";
  c.topic = "kv";
  c.block_size = kBs;
  c.max_queue_batches = max_queue;
  c.buffer_steps = buffer_steps;
  Result<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::create(c);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return std::move(p).value();
}

// One step's batch: a first block whose hash and tokens are `id`.
void publish_step(KvEventPublisher& p, uint8_t id) {
  BlockHash h;
  h.bytes[7] = id;
  const std::vector<int32_t> tokens(kBs, id);
  p.on_block_stored(BlockStoredEvent{h, std::nullopt, tokens, BlockId{1}});
  p.end_step();
}

int64_t seq_of(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t u = 0;
  for (size_t i = 0; i < 8; ++i) u = (u << 8) | static_cast<const uint8_t*>(m.data())[i];
  return static_cast<int64_t>(u);
}

// The hash of the one block of a batch publish_step made.
uint64_t block_of(const zmq::message_t& payload) {
  const msgpack::object_handle h =
      msgpack::unpack(static_cast<const char*>(payload.data()), payload.size());
  const auto events = h.get().via.array.ptr[1].as<std::vector<msgpack::object>>();
  return events.at(0).as<std::vector<msgpack::object>>().at(1).as<std::vector<uint64_t>>().at(0);
}

std::vector<zmq::message_t> recv(zmq::socket_t& s) {
  std::vector<zmq::message_t> parts;
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, kWait) == 0) return parts;
  (void)zmq::recv_multipart(s, std::back_inserter(parts));
  return parts;
}

TEST(KvEventPublisherTest, SubscriberSeesSequencedBatchesAndReplayResendsThem) {
  const std::unique_ptr<KvEventPublisher> pub = make_publisher();
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv");
  sub.connect(pub->endpoint());
  // A SUB hears only what is sent after its subscription arrives: probe until one batch comes.
  std::vector<zmq::message_t> got;
  int64_t first = -1;
  int64_t num_probes = 0;
  for (uint8_t probe = 100; first < 0; ++probe) {
    ASSERT_LT(probe, 200) << "the subscriber never heard a batch";
    publish_step(*pub, probe);
    ++num_probes;
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) > 0) {
      got.clear();
      (void)zmq::recv_multipart(sub, std::back_inserter(got));
      first = seq_of(got.at(1));
    }
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].to_string(), "kv");
  // Drain the probes sent after that one (the publisher thread may still be sending the last:
  // each probe is one batch, and the subscriber hears every one from `first` on), then three
  // known batches.
  while (first < num_probes - 1) first = seq_of(recv(sub).at(1));
  for (uint8_t id = 1; id <= 3; ++id) publish_step(*pub, id);
  for (uint8_t id = 1; id <= 3; ++id) {
    const std::vector<zmq::message_t> m = recv(sub);
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(seq_of(m[1]), num_probes + id - 1) << "one more per batch";
    EXPECT_EQ(block_of(m[2]), id);
  }

  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(pub->replay_endpoint());
  for (const int64_t start : {num_probes, int64_t{0}}) {
    const std::array<uint8_t, 8> s = {0, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(start)};
    (void)dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
    (void)dealer.send(zmq::buffer(s), zmq::send_flags::none);
    for (int64_t seq = start; seq < num_probes + 3; ++seq) {
      const std::vector<zmq::message_t> m = recv(dealer);
      ASSERT_EQ(m.size(), 3u);
      EXPECT_EQ(m[0].size(), 0u);
      EXPECT_EQ(seq_of(m[1]), seq);
      if (seq >= num_probes) {
        EXPECT_EQ(block_of(m[2]), static_cast<uint64_t>(seq - num_probes + 1));
      }
    }
    const std::vector<zmq::message_t> end = recv(dealer);
    ASSERT_EQ(end.size(), 3u);
    EXPECT_EQ(seq_of(end[1]), -1) << "the end marker";
    EXPECT_EQ(end[2].size(), 0u);
  }
}

TEST(KvEventPublisherTest, ReplayKeepsOnlyTheLastBufferSteps) {
  const std::unique_ptr<KvEventPublisher> pub = make_publisher(100, /*buffer_steps=*/2);
  for (uint8_t id = 1; id <= 5; ++id) publish_step(*pub, id);
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (pub->stats().sent_batches < 5 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(pub->replay_endpoint());
  (void)dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  (void)dealer.send(zmq::buffer(std::array<uint8_t, 8>{}), zmq::send_flags::none);
  EXPECT_EQ(seq_of(recv(dealer).at(1)), 3);
  EXPECT_EQ(seq_of(recv(dealer).at(1)), 4);
  EXPECT_EQ(seq_of(recv(dealer).at(1)), -1);
}

TEST(KvEventPublisherTest, FullQueueDropsWholeBatchesAndCountsThem) {
  const std::unique_ptr<KvEventPublisher> pub = make_publisher(/*max_queue=*/2);
  pub->pause();
  for (uint8_t id = 1; id <= 5; ++id) publish_step(*pub, id);
  pub->end_step();  // no events since the last: no batch
  KvEventPublisherStats s = pub->stats();
  EXPECT_EQ(s.queued_blocks, 2);
  EXPECT_EQ(s.dropped_blocks, 3);
  EXPECT_EQ(s.dropped_batches, 3);
  EXPECT_EQ(s.sent_batches, 0);
  pub->resume();
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (pub->stats().sent_batches < 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s = pub->stats();
  EXPECT_EQ(s.sent_batches, 2) << "sequence numbers count sent batches: no gap for a drop";
}

TEST(KvEventPublisherTest, ShutdownWithoutSubscribersDoesNotWait) {
  KvEventPublisherConfig c;
  c.endpoint = "tcp://127.0.0.1:1";  // connects to nobody
  c.block_size = kBs;
  Result<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::create(c);
  ASSERT_TRUE(p.ok()) << p.status().message();
  for (int i = 0; i < 1000; ++i) publish_step(**p, static_cast<uint8_t>(i));
  p.value().reset();  // joins the thread; the test's time limit catches a hang
  const std::unique_ptr<KvEventPublisher> bound = make_publisher();
  for (int i = 0; i < 1000; ++i) publish_step(*bound, static_cast<uint8_t>(i));
}

TEST(KvEventPublisherTest, BadOrTakenEndpointsAreErrorsNamingThem) {
  KvEventPublisherConfig c;
  c.endpoint = "bogus://x";
  Result<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::create(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("bogus://x"), std::string::npos) << p.status().message();
  const std::unique_ptr<KvEventPublisher> first = make_publisher();
  c.endpoint = first->endpoint();  // already bound: the same address again
  c.endpoint.replace(c.endpoint.rfind("127.0.0.1"), 9, "*");
  p = KvEventPublisher::create(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("Address already in use"), std::string::npos)
      << p.status().message();
}

TEST(KvEventPublisherTest, PoolEventsReachThePublisher) {
  const std::unique_ptr<KvEventPublisher> pub = make_publisher();
  BlockPool pool(BlockPoolConfig{
      .num_blocks = 3, .block_size = kBs, .enable_prefix_caching = true, .event_sink = pub.get()});
  BlockHasher hasher;
  const std::vector<int32_t> t0 = {1, 2, 3, 4}, t1 = {5, 6, 7, 8};
  const std::vector<BlockId> b = pool.allocate(2).value();
  const BlockHash h0 = hasher.hash(nullptr, t0, {});
  const BlockHash h1 = hasher.hash(&h0, t1, {});
  ASSERT_TRUE(pool.cache_block(b[0], h0, nullptr, kNullBlock, t0, {}));
  ASSERT_TRUE(pool.cache_block(b[1], h1, &h0, b[0], t1, {}));
  pool.free(b);
  ASSERT_TRUE(pool.reset_prefix_cache());
  pub->end_step();
  EXPECT_EQ(pub->stats().queued_blocks, 3) << "two stored blocks and one clear";
}

}  // namespace
}  // namespace strata::kv

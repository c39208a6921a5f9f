// The peer transport's frames (kv/peer_frames.h) as bytes: requests and response heads round
// trip; every prefix of a valid frame is refused (each decoded from a heap buffer of exactly its
// length, so ASan reports any read past the end); a decoder accepts only canonical frames -- what
// it accepts re-encodes to the same bytes -- under random mutations; every field out of range is
// refused by name; a head is matched against its request; values split only at exact lengths.
// Slot records the same way: round trip, prefixes, mutations, every field out of range.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kv/peer_frames.h"
#include "kv/tier_key.h"

namespace strata::kv {
namespace {

TierKey key(uint64_t ns, uint8_t seed) {
  TierKey k;
  k.ns = ns;
  for (size_t i = 0; i < k.hash.bytes.size(); ++i) {
    k.hash.bytes[i] = static_cast<uint8_t>(size_t{seed} * 37 + i);
  }
  return k;
}

std::vector<TierKey> keys(size_t n) {
  std::vector<TierKey> out;
  for (size_t i = 0; i < n; ++i) out.push_back(key(0x1122334455667788ULL + i, uint8_t(i)));
  return out;
}

// The bytes in a heap allocation of exactly their size: a read past the end is an ASan report.
class ExactBytes {
 public:
  explicit ExactBytes(std::string_view bytes) : data_(new char[bytes.size()]), size_(bytes.size()) {
    std::copy(bytes.begin(), bytes.end(), data_.get());
  }
  std::string_view view() const { return {data_.get(), size_}; }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_;
};

std::string request_frame(uint64_t id, size_t n) {
  std::string out;
  const std::vector<TierKey> k = keys(n);
  encode_peer_request(id, k, out);
  return out;
}

// Re-encodes a decoded request.
std::string reencode(const PeerRequest& r) {
  std::string out;
  encode_peer_request(r.request_id, r.keys, out, r.flags);
  return out;
}

std::string reencode(const PeerResponseHead& h) {
  return h.status == PeerFrameStatus::kOk
             ? encode_peer_response_head(h.request_id, h.lengths)
             : encode_peer_error_head(h.request_id, h.num_keys, h.status);
}

TEST(PeerFramesTest, RequestRoundTrips) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{30}, kMaxPeerKeys}) {
    const std::vector<TierKey> k = keys(n);
    std::string frame;
    encode_peer_request(0xfeedfacecafebeefULL, k, frame);
    EXPECT_EQ(frame.size(), kPeerRequestHeaderBytes + n * kPeerKeyBytes);
    const Result<PeerRequest> r = decode_peer_request(frame);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->request_id, 0xfeedfacecafebeefULL);
    EXPECT_EQ(r->keys, k);
    EXPECT_EQ(peek_peer_request_id(frame), 0xfeedfacecafebeefULL);
  }
}

TEST(PeerFramesTest, RequestBytesAreLittleEndianAndFixed) {
  const std::vector<TierKey> k = {key(0x0102030405060708ULL, 1)};
  std::string frame;
  encode_peer_request(0x1122, k, frame);
  ASSERT_EQ(frame.size(), 64u);
  EXPECT_EQ(frame.substr(0, 4), "SKVQ");
  EXPECT_EQ(frame[4], '\x01');  // version 1
  EXPECT_EQ(frame[8], '\x22');  // request id, low byte first
  EXPECT_EQ(frame[9], '\x11');
  EXPECT_EQ(frame[16], '\x01');  // one key
  EXPECT_EQ(frame[24], '\x08');  // the namespace, low byte first
  EXPECT_EQ(static_cast<uint8_t>(frame[32]), k[0].hash.bytes[0]);
}

TEST(PeerFramesTest, EveryPrefixOfARequestIsRefusedWithoutReadingPastIt) {
  const std::string frame = request_frame(9, 3);
  for (size_t n = 0; n < frame.size(); ++n) {
    const ExactBytes prefix(std::string_view(frame).substr(0, n));
    EXPECT_FALSE(decode_peer_request(prefix.view()).ok()) << "prefix of " << n << " bytes";
    // The id is readable from the first 16 bytes on, and only then.
    EXPECT_EQ(peek_peer_request_id(prefix.view()).has_value(), n >= 16) << n;
  }
  const ExactBytes whole(frame);
  EXPECT_TRUE(decode_peer_request(whole.view()).ok());
  const ExactBytes longer(frame + "x");
  EXPECT_FALSE(decode_peer_request(longer.view()).ok());
}

TEST(PeerFramesTest, EveryPrefixOfAResponseHeadIsRefusedWithoutReadingPastIt) {
  const std::vector<uint32_t> lengths = {5, 0, 2u << 20, 7};
  const std::string head = encode_peer_response_head(4, lengths);
  ASSERT_EQ(head.size(), kPeerResponseHeaderBytes + 4 * sizeof(uint32_t));
  for (size_t n = 0; n < head.size(); ++n) {
    const ExactBytes prefix(std::string_view(head).substr(0, n));
    EXPECT_FALSE(decode_peer_response_head(prefix.view()).ok()) << "prefix of " << n << " bytes";
  }
  const ExactBytes whole(head);
  const Result<PeerResponseHead> h = decode_peer_response_head(whole.view());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->request_id, 4u);
  EXPECT_EQ(h->lengths, lengths);
  EXPECT_EQ(h->total_bytes, 12u + (2u << 20));

  const std::string refusal = encode_peer_error_head(4, 3, PeerFrameStatus::kTooLarge);
  for (size_t n = 0; n < refusal.size(); ++n) {
    const ExactBytes prefix(std::string_view(refusal).substr(0, n));
    EXPECT_FALSE(decode_peer_response_head(prefix.view()).ok()) << n;
  }
  const Result<PeerResponseHead> r = decode_peer_response_head(refusal);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, PeerFrameStatus::kTooLarge);
  EXPECT_EQ(r->num_keys, 3u);
  EXPECT_TRUE(r->lengths.empty());
}

// Random byte flips, truncations and extensions of valid frames, and random bytes: a decoder
// accepts only frames it would write itself.
TEST(PeerFramesTest, MutatedFramesAreRefusedOrCanonical) {
  std::mt19937_64 rng(37);
  const std::vector<std::string> requests = {request_frame(1, 0), request_frame(2, 1),
                                             request_frame(3, 5)};
  const std::vector<std::string> heads = {
      encode_peer_response_head(1, std::vector<uint32_t>{}),
      encode_peer_response_head(2, std::vector<uint32_t>{1, 0, 300}),
      encode_peer_error_head(3, 2, PeerFrameStatus::kBadRequest)};
  int accepted = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    const bool is_request = (round % 2) == 0;
    std::string f = is_request ? requests[rng() % requests.size()] : heads[rng() % heads.size()];
    switch (rng() % 4) {
      case 0:  // flip bytes
        for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n && !f.empty(); ++i) {
          f[rng() % f.size()] ^= static_cast<char>(1 + rng() % 255);
        }
        break;
      case 1:
        f.resize(rng() % (f.size() + 1));
        break;
      case 2:
        f.append(1 + rng() % 8, static_cast<char>(rng()));
        break;
      case 3:
        f.assign(rng() % 80, '\0');
        for (char& c : f) c = static_cast<char>(rng());
        break;
    }
    const ExactBytes bytes(f);
    if (is_request) {
      const Result<PeerRequest> r = decode_peer_request(bytes.view());
      if (r.ok()) {
        EXPECT_EQ(reencode(*r), f);
      }
      r.ok() ? ++accepted : ++refused;
    } else {
      const Result<PeerResponseHead> h = decode_peer_response_head(bytes.view());
      if (h.ok()) {
        EXPECT_EQ(reencode(*h), f);
      }
      h.ok() ? ++accepted : ++refused;
    }
  }
  // Flips in key bytes keep a request valid; most other mutations break it.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 10000);
}

// Overwrites the little-endian field at `at` of `frame`.
template <typename T>
std::string with_field(std::string frame, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) frame[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return frame;
}

TEST(PeerFramesTest, FieldsOutOfRangeAreRefusedByName) {
  const std::string req = request_frame(5, 2);
  auto refused = [](const auto& r, const std::string& what) {
    return !r.ok() && r.status().message().find(what) != std::string::npos;
  };
  EXPECT_TRUE(refused(decode_peer_request("SKVR" + req.substr(4)), "magic"));
  EXPECT_TRUE(refused(decode_peer_request(with_field(req, 4, uint16_t{2})), "version"));
  EXPECT_TRUE(refused(decode_peer_request(with_field(req, 6, uint16_t{2})), "flags"));
  ASSERT_TRUE(decode_peer_request(with_field(req, 6, kPeerAcceptSlotRecords)).ok());
  EXPECT_EQ(decode_peer_request(with_field(req, 6, kPeerAcceptSlotRecords))->flags,
            kPeerAcceptSlotRecords);
  EXPECT_TRUE(refused(decode_peer_request(with_field(req, 20, uint32_t{1})), "reserved"));
  EXPECT_TRUE(refused(decode_peer_request(with_field(req, 16, uint32_t{3})), "bytes of keys"));
  EXPECT_TRUE(refused(decode_peer_request(with_field(req, 16, uint32_t{kMaxPeerKeys + 1})),
                      "too many keys"));
  // A key count whose byte size overflows 32 bits is refused, not wrapped.
  EXPECT_FALSE(decode_peer_request(with_field(req, 16, uint32_t{0xffffffff})).ok());
  EXPECT_FALSE(peek_peer_request_id(with_field(req, 4, uint16_t{2})).has_value());

  const std::string head = encode_peer_response_head(5, std::vector<uint32_t>{3, 4});
  EXPECT_TRUE(refused(decode_peer_response_head(with_field(head, 6, uint16_t{9})), "status"));
  EXPECT_TRUE(refused(decode_peer_response_head(with_field(head, 24, uint64_t{8})), "sum"));
  EXPECT_TRUE(refused(decode_peer_response_head(with_field(head, 16, uint32_t{3})), "lengths"));
  // A refusal with values, and lengths summing past the response limit.
  const std::string refusal = encode_peer_error_head(5, 2, PeerFrameStatus::kLookupFailed);
  EXPECT_TRUE(refused(decode_peer_response_head(with_field(refusal, 24, uint64_t{1})), "refusal"));
  std::vector<uint32_t> big(65, 4u << 20);  // 260 MiB
  uint64_t total = 0;
  for (const uint32_t n : big) total += n;
  ASSERT_GT(total, kMaxPeerResponseBytes);
  EXPECT_FALSE(decode_peer_response_head(encode_peer_response_head(5, big)).ok());
}

TEST(PeerFramesTest, AHeadIsMatchedAgainstItsRequest) {
  const Result<PeerResponseHead> h =
      decode_peer_response_head(encode_peer_response_head(8, std::vector<uint32_t>{3, 0, 4}));
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(check_peer_response(*h, 8, 3, 7).ok());
  EXPECT_EQ(check_peer_response(*h, 9, 3, 7).code(), StatusCode::kInternal);  // another request
  EXPECT_EQ(check_peer_response(*h, 8, 2, 7).code(), StatusCode::kInternal);  // another count
  EXPECT_EQ(check_peer_response(*h, 8, 3, 8).code(), StatusCode::kInternal);  // bytes past
  EXPECT_EQ(check_peer_response(*h, 8, 3, 6).code(), StatusCode::kInternal);  // bytes short

  auto refusal = [](PeerFrameStatus s) {
    return check_peer_response(*decode_peer_response_head(encode_peer_error_head(1, 2, s)), 1, 2, 0)
        .code();
  };
  EXPECT_EQ(refusal(PeerFrameStatus::kBadRequest), StatusCode::kInvalidArgument);
  EXPECT_EQ(refusal(PeerFrameStatus::kTooLarge), StatusCode::kResourceExhausted);
  EXPECT_EQ(refusal(PeerFrameStatus::kLookupFailed), StatusCode::kInternal);
  // A request refused as malformed is answered with no key count: still that refusal.
  EXPECT_EQ(check_peer_response(*decode_peer_response_head(
                                    encode_peer_error_head(1, 0, PeerFrameStatus::kBadRequest)),
                                1, 3, 0)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(PeerFramesTest, ValuesSplitOnlyAtExactLengths) {
  const Result<PeerResponseHead> h =
      decode_peer_response_head(encode_peer_response_head(1, std::vector<uint32_t>{3, 0, 4}));
  ASSERT_TRUE(h.ok());
  std::vector<std::string> values = {"untouched"};
  const std::string data = "abcdefg";
  for (size_t n = 0; n < data.size(); ++n) {
    const ExactBytes prefix(std::string_view(data).substr(0, n));
    EXPECT_FALSE(split_peer_values(*h, prefix.view(), values).ok()) << n;
    EXPECT_EQ(values, std::vector<std::string>{"untouched"});
  }
  EXPECT_FALSE(split_peer_values(*h, "abcdefgh", values).ok());
  ASSERT_TRUE(split_peer_values(*h, ExactBytes(data).view(), values).ok());
  EXPECT_EQ(values, (std::vector<std::string>{"abc", "", "defg"}));
}

TEST(PeerFramesTest, ValueLengthsRefuseResponsesPastTheLimit) {
  std::vector<uint32_t> lengths = {99};
  const std::vector<std::string> small = {"ab", "", "cde"};
  EXPECT_EQ(peer_value_lengths(small, lengths), PeerFrameStatus::kOk);
  EXPECT_EQ(lengths, (std::vector<uint32_t>{2, 0, 3}));
  // Two values of half the limit and a byte more.
  const std::vector<std::string> big(2, std::string(kMaxPeerResponseBytes / 2 + 1, 'x'));
  EXPECT_EQ(peer_value_lengths(big, lengths), PeerFrameStatus::kTooLarge);
  EXPECT_TRUE(lengths.empty());
}

PeerSlotRecord a_record() {
  PeerSlotRecord r;
  r.kind = 2;
  r.region_id = 0x0102030405060708ULL;
  r.region_bytes = kPeerRegionHeaderBytes + 10 * 4096;
  r.slot_bytes = 4096;
  r.slot_idx = 9;
  r.generation = 77;
  r.block_bytes = 4000;
  r.checksum = 0xfeedfacecafebeefULL;
  r.key = key(0x99, 3);
  r.handle = std::string(64, '\x05');
  return r;
}

std::string record_bytes(const PeerSlotRecord& r) {
  std::string out;
  encode_peer_slot_record(r, out);
  return out;
}

TEST(PeerFramesTest, SlotRecordRoundTrips) {
  const PeerSlotRecord r = a_record();
  const std::string bytes = record_bytes(r);
  EXPECT_EQ(bytes.size(), kPeerSlotRecordFixedBytes + 64);
  EXPECT_TRUE(is_peer_slot_record(bytes));
  EXPECT_FALSE(is_peer_slot_record("STRATAKR and the rest of a block value"));
  const ExactBytes exact(bytes);
  Result<PeerSlotRecord> d = decode_peer_slot_record(exact.view());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kind, r.kind);
  EXPECT_EQ(d->region_id, r.region_id);
  EXPECT_EQ(d->region_bytes, r.region_bytes);
  EXPECT_EQ(d->slot_bytes, r.slot_bytes);
  EXPECT_EQ(d->slot_idx, r.slot_idx);
  EXPECT_EQ(d->generation, r.generation);
  EXPECT_EQ(d->block_bytes, r.block_bytes);
  EXPECT_EQ(d->checksum, r.checksum);
  EXPECT_EQ(d->key, r.key);
  EXPECT_EQ(d->handle, r.handle);
  EXPECT_EQ(d->offset(), kPeerRegionHeaderBytes + 9 * 4096);
  EXPECT_EQ(record_bytes(*d), bytes);
}

TEST(PeerFramesTest, EveryPrefixOfASlotRecordIsRefusedWithoutReadingPastIt) {
  const std::string bytes = record_bytes(a_record());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const ExactBytes exact(bytes.substr(0, n));
    EXPECT_FALSE(decode_peer_slot_record(exact.view()).ok()) << n;
  }
  EXPECT_FALSE(decode_peer_slot_record(bytes + "x").ok());
}

TEST(PeerFramesTest, SlotRecordFieldsOutOfRangeAreRefusedByName) {
  const std::string bytes = record_bytes(a_record());
  auto refused = [](const std::string& b, const std::string& what) {
    const Result<PeerSlotRecord> r = decode_peer_slot_record(b);
    return !r.ok() && r.status().message().find(what) != std::string::npos;
  };
  EXPECT_TRUE(refused("STRATASX" + bytes.substr(8), "magic"));
  EXPECT_TRUE(refused(with_field(bytes, 8, uint32_t{2}), "version"));
  EXPECT_TRUE(refused(with_field(bytes, 44, uint32_t{1}), "reserved"));
  EXPECT_TRUE(refused(with_field(bytes, 112, uint32_t{0}), "handle of 0"));
  EXPECT_TRUE(refused(with_field(bytes, 112, uint32_t{257}), "handle of 257"));
  EXPECT_TRUE(refused(with_field(bytes, 112, uint32_t{63}), "bytes for a handle"));
  // The slot outside the region: past its end, of no bytes, smaller than its block, and an index
  // whose byte offset would overflow 64 bits.
  EXPECT_TRUE(refused(with_field(bytes, 40, uint32_t{10}), "outside"));
  EXPECT_TRUE(refused(with_field(bytes, 32, uint64_t{0}), "outside"));
  EXPECT_TRUE(refused(with_field(bytes, 56, uint64_t{4097}), "outside"));
  EXPECT_TRUE(refused(with_field(bytes, 24, uint64_t{100}), "outside"));
  EXPECT_TRUE(
      refused(with_field(with_field(bytes, 24, ~uint64_t{0}), 40, ~uint32_t{0}), "outside"));
  PeerSlotRecord huge = a_record();
  huge.slot_bytes = uint64_t{1} << 62;
  huge.region_bytes = ~uint64_t{0};
  huge.slot_idx = 3;
  EXPECT_FALSE(decode_peer_slot_record(record_bytes(huge)).ok());
}

TEST(PeerFramesTest, MutatedSlotRecordsAreRefusedOrCanonical) {
  const std::string bytes = record_bytes(a_record());
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string m = bytes;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) m[rng() % m.size()] = static_cast<char>(rng());
    if (rng() % 8 == 0) m.resize(rng() % (m.size() + 1));
    const ExactBytes exact(m);
    const Result<PeerSlotRecord> d = decode_peer_slot_record(exact.view());
    if (!d.ok()) continue;
    EXPECT_EQ(record_bytes(*d), m);
    EXPECT_LE(static_cast<uint64_t>(d->offset()) + d->block_bytes, d->region_bytes);
  }
}

}  // namespace
}  // namespace strata::kv

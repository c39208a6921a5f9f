#include "kv/peer_frames.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

namespace strata::kv {
namespace {

constexpr char kRequestMagic[4] = {'S', 'K', 'V', 'Q'};
constexpr char kResponseMagic[4] = {'S', 'K', 'V', 'R'};
constexpr size_t kLengthBytes = sizeof(uint32_t);

// Little-endian fields by shifts, so the frames read the same on any host.
template <typename T>
void put_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A cursor over bytes that refuses to read past their end.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  size_t left() const { return bytes_.size() - pos_; }
  template <typename T>
  bool get(T& v) {
    if (left() < sizeof(T)) return false;
    v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<T>(static_cast<T>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i));
    }
    pos_ += sizeof(T);
    return true;
  }
  bool get_bytes(void* out, size_t n) {
    if (left() < n) return false;
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

bool has_magic(std::string_view frame, const char (&magic)[4]) {
  return frame.size() >= sizeof(magic) && std::memcmp(frame.data(), magic, sizeof(magic)) == 0;
}

Status bad_frame(const std::string& what) { return Status::InvalidArgument("peer frame: " + what); }

// The fields every frame starts with after its magic.
struct Preamble {
  uint16_t version = 0;
  uint16_t word = 0;  // flags (request) or status (response)
  uint64_t request_id = 0;
  uint32_t num_keys = 0;
  uint32_t reserved = 0;
};

Status read_preamble(Reader& r, std::string_view frame, const char (&magic)[4], Preamble& p) {
  if (!has_magic(frame, magic)) return bad_frame("wrong magic");
  uint32_t m = 0;
  if (!r.get(m) || !r.get(p.version) || !r.get(p.word) || !r.get(p.request_id) ||
      !r.get(p.num_keys) || !r.get(p.reserved)) {
    return bad_frame("truncated header");
  }
  if (p.version != kPeerFrameVersion) {
    return bad_frame("unknown version " + std::to_string(p.version));
  }
  if (p.reserved != 0) return bad_frame("reserved field set");
  if (p.num_keys > kMaxPeerKeys) return bad_frame("too many keys: " + std::to_string(p.num_keys));
  return Status::Ok();
}

// word: the request's flags or the response's status.
void put_preamble(std::string& out, const char (&magic)[4], uint16_t word, uint64_t request_id,
                  uint32_t num_keys) {
  out.append(magic, sizeof(magic));
  put_le(out, kPeerFrameVersion);
  put_le(out, word);
  put_le(out, request_id);
  put_le(out, num_keys);
  put_le(out, uint32_t{0});
}

}  // namespace

void encode_peer_request(uint64_t request_id, std::span<const TierKey> keys, std::string& out,
                         uint16_t flags) {
  STRATA_CHECK(keys.size() <= kMaxPeerKeys, "a peer request carries at most kMaxPeerKeys keys");
  out.clear();
  out.reserve(kPeerRequestHeaderBytes + keys.size() * kPeerKeyBytes);
  put_preamble(out, kRequestMagic, flags, request_id, static_cast<uint32_t>(keys.size()));
  for (const TierKey& k : keys) {
    put_le(out, k.ns);
    out.append(reinterpret_cast<const char*>(k.hash.bytes.data()), k.hash.bytes.size());
  }
}

Result<PeerRequest> decode_peer_request(std::string_view frame) {
  Reader r(frame);
  Preamble p;
  STRATA_RETURN_IF_ERROR(read_preamble(r, frame, kRequestMagic, p));
  if ((p.word & ~kPeerAcceptSlotRecords) != 0) return bad_frame("unknown request flags");
  if (r.left() != size_t{p.num_keys} * kPeerKeyBytes) {
    return bad_frame("request of " + std::to_string(p.num_keys) + " keys has " +
                     std::to_string(r.left()) + " bytes of keys");
  }
  PeerRequest req;
  req.request_id = p.request_id;
  req.flags = p.word;
  req.keys.resize(p.num_keys);
  for (TierKey& k : req.keys) {
    // Cannot fail: the length was checked above.
    if (!r.get(k.ns) || !r.get_bytes(k.hash.bytes.data(), k.hash.bytes.size())) {
      return bad_frame("truncated key");
    }
  }
  return req;
}

std::optional<uint64_t> peek_peer_request_id(std::string_view frame) {
  Reader r(frame);
  uint32_t magic = 0;
  uint16_t version = 0, flags = 0;
  uint64_t id = 0;
  if (!has_magic(frame, kRequestMagic) || !r.get(magic) || !r.get(version) || !r.get(flags) ||
      !r.get(id) || version != kPeerFrameVersion) {
    return std::nullopt;
  }
  return id;
}

PeerFrameStatus peer_value_lengths(std::span<const std::string> values,
                                   std::vector<uint32_t>& lengths) {
  lengths.clear();
  uint64_t total = 0;
  for (const std::string& v : values) {
    if (v.size() > std::numeric_limits<uint32_t>::max()) break;
    total += v.size();
    if (total > kMaxPeerResponseBytes) break;
    lengths.push_back(static_cast<uint32_t>(v.size()));
  }
  if (lengths.size() == values.size()) return PeerFrameStatus::kOk;
  lengths.clear();
  return PeerFrameStatus::kTooLarge;
}

std::string encode_peer_response_head(uint64_t request_id, std::span<const uint32_t> lengths) {
  STRATA_CHECK(lengths.size() <= kMaxPeerKeys, "a peer response answers at most kMaxPeerKeys keys");
  std::string out;
  out.reserve(kPeerResponseHeaderBytes + lengths.size() * kLengthBytes);
  put_preamble(out, kResponseMagic, static_cast<uint16_t>(PeerFrameStatus::kOk), request_id,
               static_cast<uint32_t>(lengths.size()));
  uint64_t total = 0;
  for (const uint32_t n : lengths) total += n;
  put_le(out, total);
  for (const uint32_t n : lengths) put_le(out, n);
  return out;
}

std::string encode_peer_error_head(uint64_t request_id, uint32_t num_keys, PeerFrameStatus status) {
  STRATA_CHECK(status != PeerFrameStatus::kOk, "an error head carries a refusal");
  std::string out;
  out.reserve(kPeerResponseHeaderBytes);
  put_preamble(out, kResponseMagic, static_cast<uint16_t>(status), request_id,
               std::min<uint32_t>(num_keys, kMaxPeerKeys));
  put_le(out, uint64_t{0});
  return out;
}

Result<PeerResponseHead> decode_peer_response_head(std::string_view head) {
  Reader r(head);
  Preamble p;
  STRATA_RETURN_IF_ERROR(read_preamble(r, head, kResponseMagic, p));
  PeerResponseHead out;
  out.request_id = p.request_id;
  out.num_keys = p.num_keys;
  switch (static_cast<PeerFrameStatus>(p.word)) {
    case PeerFrameStatus::kOk:
    case PeerFrameStatus::kBadRequest:
    case PeerFrameStatus::kTooLarge:
    case PeerFrameStatus::kLookupFailed:
      out.status = static_cast<PeerFrameStatus>(p.word);
      break;
  }
  if (static_cast<uint16_t>(out.status) != p.word) {
    return bad_frame("unknown response status " + std::to_string(p.word));
  }
  if (!r.get(out.total_bytes)) return bad_frame("truncated header");
  const bool ok = out.status == PeerFrameStatus::kOk;
  if (!ok && out.total_bytes != 0) return bad_frame("a refusal carries values");
  const size_t expected = ok ? size_t{p.num_keys} * kLengthBytes : 0;
  if (r.left() != expected) {
    return bad_frame("head of " + std::to_string(p.num_keys) + " keys has " +
                     std::to_string(r.left()) + " bytes of lengths");
  }
  if (!ok) return out;
  out.lengths.resize(p.num_keys);
  uint64_t total = 0;
  for (uint32_t& n : out.lengths) {
    if (!r.get(n)) return bad_frame("truncated lengths");  // cannot happen: checked above
    total += n;                                      // at most kMaxPeerKeys * 4 GiB: no overflow
  }
  if (total != out.total_bytes) return bad_frame("lengths do not sum to the total");
  if (total > kMaxPeerResponseBytes) {
    return bad_frame("response of " + std::to_string(total) + " bytes");
  }
  return out;
}

Status check_peer_response(const PeerResponseHead& head, uint64_t request_id, size_t num_keys,
                           uint64_t value_bytes) {
  if (head.request_id != request_id) {
    return Status::Internal("peer answered request " + std::to_string(head.request_id) + ", not " +
                            std::to_string(request_id));
  }
  // A refusal first: a request refused as malformed is answered without its key count.
  switch (head.status) {
    case PeerFrameStatus::kOk:
      break;
    case PeerFrameStatus::kBadRequest:
      return Status::InvalidArgument("peer refused the request as malformed");
    case PeerFrameStatus::kTooLarge:
      return Status::ResourceExhausted("peer's values pass the response limit");
    case PeerFrameStatus::kLookupFailed:
      return Status::Internal("peer's lookup failed");
  }
  if (head.num_keys != num_keys) {
    return Status::Internal("peer answered " + std::to_string(head.num_keys) + " keys of " +
                            std::to_string(num_keys));
  }
  if (head.total_bytes != value_bytes) {
    return Status::Internal("peer sent " + std::to_string(value_bytes) + " bytes of values for " +
                            std::to_string(head.total_bytes));
  }
  return Status::Ok();
}

Status split_peer_values(const PeerResponseHead& head, std::string_view data,
                         std::vector<std::string>& values) {
  if (head.status != PeerFrameStatus::kOk || head.lengths.size() != head.num_keys) {
    return bad_frame("no values in a refusal");
  }
  uint64_t total = 0;
  for (const uint32_t n : head.lengths) total += n;
  if (total != data.size()) {
    return bad_frame(std::to_string(data.size()) + " bytes of values for lengths summing to " +
                     std::to_string(total));
  }
  values.resize(head.num_keys);
  size_t at = 0;
  for (size_t i = 0; i < head.lengths.size(); ++i) {
    values[i].assign(data.substr(at, head.lengths[i]));
    at += head.lengths[i];
  }
  return Status::Ok();
}

void encode_peer_slot_record(const PeerSlotRecord& r, std::string& out) {
  STRATA_CHECK(!r.handle.empty() && r.handle.size() <= kMaxPeerRegionHandleBytes,
               "a slot record's handle is 1..kMaxPeerRegionHandleBytes bytes");
  out.clear();
  out.reserve(kPeerSlotRecordFixedBytes + r.handle.size());
  out.append(kPeerSlotRecordMagic, sizeof(kPeerSlotRecordMagic));
  put_le(out, kPeerSlotRecordVersion);
  put_le(out, r.kind);
  put_le(out, r.region_id);
  put_le(out, r.region_bytes);
  put_le(out, r.slot_bytes);
  put_le(out, r.slot_idx);
  put_le(out, uint32_t{0});
  put_le(out, r.generation);
  put_le(out, r.block_bytes);
  put_le(out, r.checksum);
  put_le(out, r.key.ns);
  out.append(reinterpret_cast<const char*>(r.key.hash.bytes.data()), r.key.hash.bytes.size());
  put_le(out, static_cast<uint32_t>(r.handle.size()));
  out.append(r.handle);
}

bool is_peer_slot_record(std::string_view value) {
  return value.size() >= sizeof(kPeerSlotRecordMagic) &&
         std::memcmp(value.data(), kPeerSlotRecordMagic, sizeof(kPeerSlotRecordMagic)) == 0;
}

Result<PeerSlotRecord> decode_peer_slot_record(std::string_view value) {
  const auto bad_record = [](const std::string& what) {
    return Status::InvalidArgument("slot record: " + what);
  };
  if (!is_peer_slot_record(value)) return bad_record("wrong magic");
  Reader r(value.substr(sizeof(kPeerSlotRecordMagic)));
  PeerSlotRecord out;
  uint32_t version = 0, reserved = 0, handle_bytes = 0;
  if (!r.get(version) || !r.get(out.kind) || !r.get(out.region_id) || !r.get(out.region_bytes) ||
      !r.get(out.slot_bytes) || !r.get(out.slot_idx) || !r.get(reserved) ||
      !r.get(out.generation) || !r.get(out.block_bytes) || !r.get(out.checksum) ||
      !r.get(out.key.ns) || !r.get_bytes(out.key.hash.bytes.data(), out.key.hash.bytes.size()) ||
      !r.get(handle_bytes)) {
    return bad_record("truncated");
  }
  if (version != kPeerSlotRecordVersion) {
    return bad_record("unknown version " + std::to_string(version));
  }
  if (reserved != 0) return bad_record("reserved field set");
  if (handle_bytes == 0 || handle_bytes > kMaxPeerRegionHandleBytes) {
    return bad_record("handle of " + std::to_string(handle_bytes) + " bytes");
  }
  if (r.left() != handle_bytes) {
    return bad_record(std::to_string(r.left()) + " bytes for a handle of " +
                      std::to_string(handle_bytes));
  }
  out.handle.resize(handle_bytes);
  if (!r.get_bytes(out.handle.data(), handle_bytes)) return bad_record("truncated handle");
  // The slot inside the region, by divisions so that no product overflows.
  const auto header = static_cast<uint64_t>(kPeerRegionHeaderBytes);
  if (out.slot_bytes == 0 || out.block_bytes == 0 || out.block_bytes > out.slot_bytes ||
      out.region_bytes < header ||
      (out.region_bytes - header) / out.slot_bytes <= uint64_t{out.slot_idx} ||
      out.region_bytes > uint64_t{std::numeric_limits<int64_t>::max()}) {
    return bad_record("slot " + std::to_string(out.slot_idx) + " of " +
                      std::to_string(out.slot_bytes) + " bytes (block of " +
                      std::to_string(out.block_bytes) + ") outside a region of " +
                      std::to_string(out.region_bytes));
  }
  return out;
}

}  // namespace strata::kv

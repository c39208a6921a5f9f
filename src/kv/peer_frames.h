#pragma once
// The frames of the peer transport (peer_transport.h): pure functions over bytes, no network, so
// the parsers are unit-tested and fuzzed on their own. Every integer is little endian.
//
//   request   "SKVQ"  version u16  flags u16  request_id u64  num_keys u32  reserved u32 (0)
//             then num_keys keys of 40 bytes: namespace u64, chain hash [32]
//             flags: kPeerAcceptSlotRecords or 0; any other bit is refused
//   response  head:  "SKVR"  version u16  status u16  request_id u64  num_keys u32  reserved u32
//   (0)
//                    total_bytes u64, then (status ok only) num_keys value lengths u32 (0: absent)
//             then the values, back to back in key order (total_bytes of them)
//
// A frame is exactly as long as its header says: a decoder refuses anything shorter, longer or
// with a field out of range, naming the check (InvalidArgument), and never reads past the bytes
// it was given. The response's head and its values may travel apart (UCX sends the head as the
// Active Message header, ucx_peer_transport.h), so the head is decoded alone and the values are
// split by it.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/tier_key.h"

namespace strata::kv {

inline constexpr uint16_t kPeerFrameVersion = 1;
// Keys one request carries: the head of its response (lengths) must fit a UCX Active Message
// header, about 8 KiB on every transport with the default segment size.
inline constexpr size_t kMaxPeerKeys = 1024;
// Value bytes one response carries: four times the largest a decode instance asks for (30 blocks
// of the 8B model's 2 MiB), so a response is never refused in normal use while a peer cannot make
// the client allocate without bound.
inline constexpr uint64_t kMaxPeerResponseBytes = uint64_t{256} << 20;
inline constexpr size_t kPeerRequestHeaderBytes = 24;
inline constexpr size_t kPeerKeyBytes = 40;
inline constexpr size_t kPeerResponseHeaderBytes = 32;

// What a response says of its request.
enum class PeerFrameStatus : uint16_t {
  kOk = 0,
  kBadRequest = 1,    // the request frame did not decode
  kTooLarge = 2,      // the values pass kMaxPeerResponseBytes, one 4 GiB, or the head UCX's limit
  kLookupFailed = 3,  // the server's lookup failed (threw, or broke its contract)
};

// A request flag: the client may take a key's value as a slot record (below) where the server
// holds the block in a region both processes map (peer_region.h); without it, values only.
inline constexpr uint16_t kPeerAcceptSlotRecords = 1;

struct PeerRequest {
  uint64_t request_id = 0;
  uint16_t flags = 0;
  std::vector<TierKey> keys;
};

struct PeerResponseHead {
  uint64_t request_id = 0;
  PeerFrameStatus status = PeerFrameStatus::kOk;
  uint32_t num_keys = 0;
  uint64_t total_bytes = 0;       // the sum of lengths
  std::vector<uint32_t> lengths;  // num_keys of them when status is kOk, else none
};

// A request frame into out (its buffer reused). keys.size() <= kMaxPeerKeys.
void encode_peer_request(uint64_t request_id, std::span<const TierKey> keys, std::string& out,
                         uint16_t flags = 0);
// The whole request frame, checked.
Result<PeerRequest> decode_peer_request(std::string_view frame);
// The request id of a frame whose header starts right (magic, version), for answering a request
// that does not decode with an error; nullopt otherwise (such a frame is dropped unanswered).
std::optional<uint64_t> peek_peer_request_id(std::string_view frame);

// The lengths of values for a response head: kTooLarge when one passes 4 GiB or all together pass
// kMaxPeerResponseBytes (then lengths is left empty).
PeerFrameStatus peer_value_lengths(std::span<const std::string> values,
                                   std::vector<uint32_t>& lengths);
// The head of an ok response (lengths.size() <= kMaxPeerKeys; total_bytes is their sum).
std::string encode_peer_response_head(uint64_t request_id, std::span<const uint32_t> lengths);
// The head of a refusal (status not kOk): no lengths, no values.
std::string encode_peer_error_head(uint64_t request_id, uint32_t num_keys, PeerFrameStatus status);
// The whole head, checked: lengths sum to total_bytes, which is at most kMaxPeerResponseBytes.
Result<PeerResponseHead> decode_peer_response_head(std::string_view head);
// Whether head answers request request_id of num_keys keys and value_bytes of values came with
// it; a refusal becomes its Status (InvalidArgument, ResourceExhausted, Internal).
Status check_peer_response(const PeerResponseHead& head, uint64_t request_id, size_t num_keys,
                           uint64_t value_bytes);
// values[i] = the bytes of value i of data (the values of an ok response, back to back), sized to
// head.num_keys. InvalidArgument, values untouched, unless data holds exactly total_bytes.
Status split_peer_values(const PeerResponseHead& head, std::string_view data,
                         std::vector<std::string>& values);

// A slot record: where a block lies in a region the server shares with processes on its machine
// (peer_region.h), sent in place of the block's value when the request carried
// kPeerAcceptSlotRecords. 124 bytes plus the handle, every integer little endian:
//
//   "STRATASR"  version u32  kind u32  region_id u64  region_bytes u64  slot_bytes u64
//   slot_idx u32  reserved u32 (0)  generation u64  block_bytes u64  checksum u64
//   namespace u64  chain hash [32]  handle_bytes u32  handle [handle_bytes]
//
// The slot's bytes lie at kPeerRegionHeaderBytes + slot_idx * slot_bytes of the region;
// generation changes before the slot is written again, so a reader that sees the same record
// after its copy knows the bytes it copied were not touched meanwhile (docs/kv.md).
inline constexpr char kPeerSlotRecordMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'R'};
inline constexpr uint32_t kPeerSlotRecordVersion = 1;
inline constexpr size_t kPeerSlotRecordFixedBytes = 116;
inline constexpr size_t kMaxPeerRegionHandleBytes = 256;
// The region's first bytes are its own header (peer_region.h); slots follow.
inline constexpr int64_t kPeerRegionHeaderBytes = 4096;

struct PeerSlotRecord {
  uint32_t kind = 0;  // PeerRegionKind
  uint64_t region_id = 0;
  uint64_t region_bytes = 0;
  uint64_t slot_bytes = 0;
  uint32_t slot_idx = 0;
  uint64_t generation = 0;
  uint64_t block_bytes = 0;
  uint64_t checksum = 0;  // tier_checksum of the block's bytes
  TierKey key;
  std::string handle;

  // Where the slot's bytes start in the region.
  int64_t offset() const {
    return kPeerRegionHeaderBytes +
           static_cast<int64_t>(slot_idx) * static_cast<int64_t>(slot_bytes);
  }
};

void encode_peer_slot_record(const PeerSlotRecord& r, std::string& out);
// Whether a value is a slot record rather than a block value (its magic; the rest unchecked).
bool is_peer_slot_record(std::string_view value);
// The whole record, checked: length, magic, version, a handle of 1..kMaxPeerRegionHandleBytes,
// a slot of block_bytes <= slot_bytes that lies inside region_bytes (no overflow). What it
// names (kind, key, block size) is the caller's to compare.
Result<PeerSlotRecord> decode_peer_slot_record(std::string_view value);

}  // namespace strata::kv

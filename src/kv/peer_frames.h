#pragma once
// The frames of the peer transport (peer_transport.h): pure functions over bytes, no network, so
// the parsers are unit-tested and fuzzed on their own. Every integer is little endian.
//
//   request   "SKVQ"  version u16  flags u16 (0)  request_id u64  num_keys u32  reserved u32 (0)
//             then num_keys keys of 40 bytes: namespace u64, chain hash [32]
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

struct PeerRequest {
  uint64_t request_id = 0;
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
void encode_peer_request(uint64_t request_id, std::span<const TierKey> keys, std::string& out);
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

}  // namespace strata::kv

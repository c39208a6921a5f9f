// libFuzzer target: the peer transport's frame decoders (kv/peer_frames.h) on arbitrary bytes, as
// a server receives a request and a client a response from a peer. The first byte picks what the
// rest is: a request frame; a response head; a response head (its length in the next two
// bytes) followed by values to split by it; or a slot record (a value a decode instance copies a
// block by). A frame is refused (InvalidArgument) or accepted only
// when it is exactly what the encoder writes for what it decoded to; values split only when
// their bytes are exactly the head's total, into strings of the head's lengths. A crash, an
// overread or a sanitizer report is a bug.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kv/peer_frames.h"

namespace {

using strata::StatusCode;
using namespace strata::kv;

void fuzz_request(std::string_view frame) {
  const strata::Result<PeerRequest> r = decode_peer_request(frame);
  if (!r.ok()) {
    STRATA_CHECK(r.status().code() == StatusCode::kInvalidArgument, "a refused frame says why");
    return;
  }
  std::string again;
  encode_peer_request(r->request_id, r->keys, again, r->flags);
  STRATA_CHECK(again == frame, "an accepted request is exactly what the encoder writes");
  STRATA_CHECK(peek_peer_request_id(frame) == r->request_id, "peek reads the decoded id");
}

// The head, checked, or nullopt when it is refused.
std::optional<PeerResponseHead> fuzz_head(std::string_view head) {
  strata::Result<PeerResponseHead> h = decode_peer_response_head(head);
  if (!h.ok()) {
    STRATA_CHECK(h.status().code() == StatusCode::kInvalidArgument, "a refused head says why");
    return std::nullopt;
  }
  const std::string again = h->status == PeerFrameStatus::kOk
                                ? encode_peer_response_head(h->request_id, h->lengths)
                                : encode_peer_error_head(h->request_id, h->num_keys, h->status);
  STRATA_CHECK(again == head, "an accepted head is exactly what the encoder writes");
  STRATA_CHECK(h->total_bytes <= kMaxPeerResponseBytes, "an accepted head is within the limit");
  const strata::Status matched =
      check_peer_response(*h, h->request_id, h->num_keys, h->total_bytes);
  STRATA_CHECK(matched.ok() == (h->status == PeerFrameStatus::kOk),
               "a head matches its own request unless it is a refusal");
  return std::move(h).value();
}

void fuzz_split(std::string_view head, std::string_view data) {
  const std::optional<PeerResponseHead> p = fuzz_head(head);
  if (!p) return;
  std::vector<std::string> values = {"before"};
  const strata::Status s = split_peer_values(*p, data, values);
  if (!s.ok()) {
    STRATA_CHECK(p->status != PeerFrameStatus::kOk || data.size() != p->total_bytes,
                 "values of exactly the total split");
    STRATA_CHECK(values.size() == 1 && values[0] == "before", "a refused split leaves values");
    return;
  }
  STRATA_CHECK(values.size() == p->num_keys, "one value per key");
  std::string joined;
  for (size_t i = 0; i < values.size(); ++i) {
    STRATA_CHECK(values[i].size() == p->lengths[i], "each value has its length");
    joined += values[i];
  }
  STRATA_CHECK(joined == data, "the values are the bytes, in order");
}

void fuzz_slot_record(std::string_view value) {
  const strata::Result<PeerSlotRecord> r = decode_peer_slot_record(value);
  if (!r.ok()) {
    STRATA_CHECK(r.status().code() == StatusCode::kInvalidArgument, "a refused record says why");
    return;
  }
  std::string again;
  encode_peer_slot_record(*r, again);
  STRATA_CHECK(again == value, "an accepted record is exactly what the encoder writes");
  STRATA_CHECK(r->block_bytes <= r->slot_bytes && r->offset() >= kPeerRegionHeaderBytes &&
                   static_cast<uint64_t>(r->offset()) + r->slot_bytes <= r->region_bytes,
               "an accepted record's slot lies inside its region");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      fuzz_request(rest);
      break;
    case 1:
      (void)fuzz_head(rest);
      break;
    case 2: {
      if (rest.size() < 2) return 0;
      const size_t n = static_cast<uint8_t>(rest[0]) | size_t{static_cast<uint8_t>(rest[1])} << 8;
      const std::string_view body = rest.substr(2);
      fuzz_split(body.substr(0, n), body.substr(std::min(n, body.size())));
      break;
    }
    case 3:
      fuzz_slot_record(rest);
      break;
  }
  return 0;
}

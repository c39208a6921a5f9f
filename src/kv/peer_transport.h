#pragma once
// The transport of prefill/decode disaggregation: a decode instance asks a prefill
// instance for KV blocks by TierKey and gets each block's value back, as dumb as Redis' MGET --
// one round trip for a list of keys, and per key either opaque bytes or "absent". The bytes are
// whatever the caller put there (the remote tier's self-checking block values, say); the transport
// never looks inside them, so the caller checks what it decodes exactly as it checks a Redis read.
//
// The interface is what a deployment swaps: ucx_peer_transport.h implements it over UCX; a test
// or a single-node setup may implement it in-process.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/tier_key.h"

namespace strata::kv {

// Serves keys to peers: called on the server's thread with the keys of one request; fills
// values[i] with key i's value, or leaves it empty when absent. values arrives sized to
// keys.size(), every string empty; resizing it fails the request (the peer gets an error). Must
// not throw. A value is absent and empty alike: a peer cannot tell an empty value from none.
// flags: the request's (peer_frames.h): with kPeerAcceptSlotRecords a value may be a slot record.
using PeerBlockLookup = std::function<void(std::span<const TierKey> keys, uint16_t flags,
                                           std::vector<std::string>& values)>;

// Answers peers' requests with a PeerBlockLookup until destroyed. The destructor stops serving:
// requests in flight are dropped (their clients see Unavailable).
class PeerServer {
 public:
  virtual ~PeerServer() = default;
  // "host:port" a client connects to.
  virtual std::string address() const = 0;
};

// One connection to one peer. Not thread-safe: one thread uses a client at a time (a thread that
// talks to several peers, or several threads, hold a client each).
class PeerClient {
 public:
  virtual ~PeerClient() = default;
  // One round trip: values[i] = key i's value, or empty when the peer lacks it. Unavailable when
  // the peer did not answer within the client's timeout or the connection is gone (then values are
  // all empty); InvalidArgument for more keys than one request carries (kMaxPeerKeys,
  // peer_frames.h); another error when the answer is malformed or the peer refused the request.
  // Never throws.
  virtual Status get(std::span<const TierKey> keys, std::vector<std::string>& values) = 0;
  // The same with the request's flags (peer_frames.h): with kPeerAcceptSlotRecords, a value may
  // be a slot record. A client that carries no flags asks for values (the default).
  virtual Status get_flagged(std::span<const TierKey> keys, uint16_t /*flags*/,
                             std::vector<std::string>& values) {
    return get(keys, values);
  }
};

}  // namespace strata::kv

#pragma once
// PeerSource: blocks read from a prefill instance's PeerOutbox over the peer transport (the
// decode side of disaggregation, docs/kv.md "Disaggregation"); RemoteFetcher's source on a
// decode instance.
//
// get() asks for the blocks in chain order, in round trips of at most options.chunk_blocks (and
// the transport's kMaxPeerResponseBytes), each value checked whole as a Redis value is
// (BlockValueFormat::decode; a value that fails is a miss, counted as bad). A block the peer
// lacks may still be on its way into the outbox (the prefill instance writes its blocks through
// once they are cached), so it is asked again, backing off from 1 to 16 ms, until
// options.wait has passed since the get began; then it is NotFound, and so is every block past
// it without asking (the chain breaks at the first missing block). A peer that does not answer
// (gone, or past the connection's timeout) makes the blocks not read yet Unavailable, and the
// connection is made again at a later get (at most once a second).
//
// get() from one thread at a time (RemoteFetcher's); stats() from any.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/block_source.h"
#include "kv/block_value.h"
#include "kv/peer_transport.h"
#include "strata/latency_histogram.h"

namespace strata::kv {

struct PeerSourceOptions {
  // How long a block the peer lacks is asked for again, from the start of a get.
  std::chrono::milliseconds wait{1000};
  // Keys one round trip asks for at most (also bounded by kMaxPeerKeys and the bytes of
  // kMaxPeerResponseBytes).
  size_t chunk_blocks = 64;
};

// Makes a connection to the prefill instance (connect_ucx_peer, or a test's in-process peer).
using PeerConnect = std::function<Result<std::unique_ptr<PeerClient>>()>;

struct PeerSourceStats {
  int64_t num_get_blocks = 0;  // blocks asked for
  int64_t num_hits = 0;        // read and verified
  int64_t num_bad = 0;         // read but failing a check (treated as misses)
  int64_t num_missing = 0;     // not found by the end of the wait
  int64_t num_errors = 0;      // round trips that failed (no answer, no connection)
  int64_t num_round_trips = 0;
  int64_t bytes_read = 0;
  LatencyHistogram get_latency;  // each get() call
};

class PeerSource final : public BlockSource {
 public:
  PeerSource(BlockValueFormat format, PeerConnect connect, PeerSourceOptions options = {});

  void get(std::span<BlockGet> blocks) override;
  PeerSourceStats stats() const;

 private:
  // The connection, made now if there is none and the last attempt is a second old.
  PeerClient* client();

  const BlockValueFormat format_;
  const PeerConnect connect_;
  const PeerSourceOptions options_;
  std::unique_ptr<PeerClient> client_;
  std::optional<std::chrono::steady_clock::time_point> last_connect_;  // the last attempt
  std::vector<TierKey> keys_;
  std::vector<std::string> values_;  // received into; their buffers kept from get to get
  mutable std::mutex mu_;            // guards stats_
  PeerSourceStats stats_;
};

}  // namespace strata::kv

#pragma once
// PeerSource: blocks read from a prefill instance's PeerOutbox over the peer transport (the
// decode side of disaggregation, docs/kv.md "Disaggregation"); RemoteFetcher's source on a
// decode instance. With several prefill instances (a router picks one per request), each round
// trip asks the one that last had the blocks first, and the others when it lacks the first
// block asked for: a chain's blocks all come from the instance that computed it, and a get that
// mixes requests of several instances costs a round trip per instance.
//
// get() reads each chain (BlockGet::chain: one request's blocks) in chain order, one chain after
// another, in round trips of at most options.chunk_blocks (and the transport's
// kMaxPeerResponseBytes), each value checked whole as a Redis value is (BlockValueFormat::decode;
// a value that fails is a miss, counted as bad). A block the peer lacks may still be on its way
// into the outbox (the prefill instance writes its blocks through once they are cached, step by
// step), so it is asked again, backing off from 1 to 16 ms, until options.wait has passed since
// the get began, or since the last time the chain's BlockGet::producing was seen true (the
// decode instance's call to the prefill instance still running: the blocks are read as the
// prefill computes them); then it is NotFound, and so is every block of its chain past it
// without asking (a chain breaks at its first missing block; the other chains go on). When no peer
// answers (gone, or past the connection's timeout) the blocks not read yet are Unavailable; a
// connection that failed is made again at a later round trip (at most once a second).
//
// On one machine (options.open_region) a block may come as a slot record of the prefill
// instance's region: copied out into BlockGet::out and confirmed by a second round trip within
// get(), or with options.claim_slots left there as a claim (BlockGet::claim) that the caller
// copies straight into its pool and then has confirmed (confirm(); docs/kv.md "One machine").
//
// get() from one thread at a time (RemoteFetcher's); confirm() likewise, never beside get() on
// the same object; stats() from any.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/block_source.h"
#include "kv/block_value.h"
#include "kv/peer_frames.h"
#include "kv/peer_region.h"
#include "kv/peer_transport.h"
#include "strata/latency_histogram.h"

namespace strata::kv {

struct PeerSourceOptions {
  // How long a block the peer lacks is asked for again, from the start of a get.
  std::chrono::milliseconds wait{1000};
  // Keys one round trip asks for at most (also bounded by kMaxPeerKeys and the bytes of
  // kMaxPeerResponseBytes).
  size_t chunk_blocks = 64;
  // Threads that check and decode a round trip's values into their slots (the calling thread
  // among them): a block of the 8B shape is 2 MiB, whose check and copy take about as long as
  // its transfer over shared memory. 0: a quarter of the cores, at most 4.
  int decode_threads = 0;
  // Set: the round trips accept slot records (peer_frames.h), whose blocks are copied out of the
  // prefill instance's region, opened by this, once per region (same machine only; docs/kv.md).
  // A region that does not open makes that peer's later round trips ask for values again.
  PeerRegionOpener open_region = {};
  // With open_region: a slot record's block is not copied here but handed back as a claim
  // (BlockGet::claim), which the caller copies straight into its pool (BlockMover::
  // start_from_region) and then has confirmed (confirm()); false: copied into BlockGet::out and
  // confirmed within get().
  bool claim_slots = false;
};

// A block a prefill instance's region holds, as a slot record named it (claim_slots): where it
// lies in this process, and what a confirmation must find again.
struct PeerSlotClaim {
  size_t peer = 0;  // the prefill instance's index in the PeerSource's connects
  TierKey key;
  std::string record;     // the slot record as served: the confirmation must serve the same
  uint64_t checksum = 0;  // the prefill instance's XXH3 of the block (tier_checksum)
  std::shared_ptr<PeerRegionView> view;
  int64_t offset = 0;  // the slot's first byte in the region; a block's bytes fit after it

  const std::byte* src() const { return view->data() + offset; }
};

// Makes a connection to the prefill instance (connect_ucx_peer, or a test's in-process peer).
using PeerConnect = std::function<Result<std::unique_ptr<PeerClient>>()>;

struct PeerSourceStats {
  int64_t num_get_blocks = 0;  // blocks asked for
  int64_t num_hits = 0;        // read and verified (a claim: once confirmed)
  int64_t num_bad = 0;         // read but failing a check (treated as misses)
  int64_t num_missing = 0;     // not found by the end of the wait
  int64_t num_errors = 0;      // round trips that failed (no answer, no connection)
  int64_t num_round_trips = 0;
  int64_t bytes_read = 0;
  int64_t num_slot_hits = 0;    // of num_hits, copied out of a peer region (slot records)
  int64_t num_slot_reused = 0;  // slot records whose slot was taken again during the copy
  // Of num_slot_hits, copied straight into the pool (claims, confirm()) rather than through a
  // host slot.
  int64_t num_slot_pool_blocks = 0;
  // The round trips that brought blocks, from the ask to the last value checked: a get's time
  // less its waits for blocks not there yet (bytes_read / transfer_seconds is the rate of the
  // transfer itself, where a get that overlaps the prefill lasts as long as the prefill). For
  // claims: the records' round trip and the confirmation's; the copy into the pool is the
  // promotion's time (KvTierStats::up_seconds).
  double transfer_seconds = 0.0;
  LatencyHistogram get_latency;  // each get() call

  PeerSourceStats& operator+=(const PeerSourceStats& other);
};

class PeerSource final : public BlockSource {
 public:
  // connects: one per prefill instance, at least one.
  PeerSource(BlockValueFormat format, std::vector<PeerConnect> connects,
             PeerSourceOptions options = {});
  PeerSource(BlockValueFormat format, PeerConnect connect, PeerSourceOptions options = {})
      : PeerSource(std::move(format), std::vector<PeerConnect>{std::move(connect)},
                   std::move(options)) {}

  void get(std::span<BlockGet> blocks) override;
  // Asks the claims' prefill instances for their keys' records again, once the caller's copies of
  // the claims' blocks have completed: ok[i] says whether claims[i]'s record is the same, which
  // proves its slot was not written since it was served (docs/kv.md "One machine"). copied[i]
  // false (the copy's own check failed): not asked for, ok[i] false. No answer: false. Counted
  // as a chain is (claims in chain order): hits up to the first that failed, which is bad (a
  // changed record also counts as num_slot_reused). From one thread at a time, never beside
  // get() on the same PeerSource (KvTiers keeps a PeerSource, with connections of its own, for
  // confirmations).
  std::vector<uint8_t> confirm(std::span<const PeerSlotClaim* const> claims,
                               std::span<const uint8_t> copied);
  PeerSourceStats stats() const;

 private:
  struct Peer {
    PeerConnect connect;
    std::unique_ptr<PeerClient> client;
    std::optional<std::chrono::steady_clock::time_point> last_connect;  // the last attempt
    bool slots = true;  // asked for slot records (with open_region), until a region fails to open
  };
  // What one present value of a round trip came to.
  enum class Read : uint8_t { kValue, kSlot, kClaim, kNoRegion };
  // Peer p's connection, made now if there is none and the last attempt is a second old.
  PeerClient* client(size_t p);
  // One chain of a get (above), whose wait counts from start.
  void get_chain(std::span<BlockGet> blocks, std::chrono::steady_clock::time_point start,
                 size_t per_trip, PeerSourceStats& s);
  // Asks peer p, over c (none: an error), for confirm_keys_' slot records again, into
  // confirmed_; a failed round trip counts as an error and drops a connection that broke.
  Status ask_records_again(size_t p, PeerClient* c, PeerSourceStats& s);
  // Asks the peers for keys_ (the one that last had blocks first) until one has the first;
  // values_ holds its answer. Ok with values_[0] empty when none has it; the last error when
  // none answered.
  Status ask(size_t n, PeerSourceStats& s);
  // The request flags for peer p.
  uint16_t flags(size_t p) const;
  // Copies the block of a slot record (value) out of its region into g.out and checks it, or
  // with claim_slots sets g.claim; kind says what value was (kNoRegion: its region did not open
  // here). p: the peer that served it.
  Status read_slot(std::string_view value, size_t p, BlockGet& g, Read& kind);
  // The region a record names, opened once; null when it does not open.
  std::shared_ptr<PeerRegionView> region(const PeerSlotRecord& r);
  // Asks peer p for the keys of the first `present` values that were slot records read well
  // (reads_[i] == kSlot, decoded_[i] ok) again; each whose record changed fails (its slot was
  // taken again during the copy, or the peer let it go).
  void confirm_slots(size_t p, std::span<BlockGet> blocks, size_t present, PeerSourceStats& s);

  const BlockValueFormat format_;
  const PeerSourceOptions options_;
  std::vector<Peer> peers_;
  size_t preferred_ = 0;  // the peer that last had the blocks asked for
  std::vector<TierKey> keys_;
  std::vector<std::string> values_;  // received into; their buffers kept from get to get
  std::vector<Status> decoded_;      // each present value's check, per round trip
  std::vector<Read> reads_;          // and what it was
  std::vector<TierKey> confirm_keys_;
  std::vector<std::string> confirmed_;
  std::mutex regions_mu_;  // guards regions_ (the decode threads open regions)
  std::unordered_map<std::string, std::shared_ptr<PeerRegionView>> regions_;
  std::unique_ptr<ThreadPool> decoders_;
  mutable std::mutex mu_;            // guards stats_
  PeerSourceStats stats_;
};

}  // namespace strata::kv

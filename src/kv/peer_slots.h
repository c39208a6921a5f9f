#pragma once
// PeerSlots: a prefill instance's peer region (peer_region.h) cut into block-sized slots, and
// which block each slot holds -- the prefill side of disaggregation on one machine (docs/kv.md,
// "Disaggregation", "One machine"). KvTiers puts every block it writes down into a slot as well
// (least recently used slot first); a lookup with kPeerAcceptSlotRecords answers the blocks a
// slot holds with a slot record (peer_frames.h) instead of a value.
//
// The safety rule, which a reader relies on: a slot's generation is bumped, and its block
// forgotten, under the lock BEFORE its bytes are written again (reserve), and the new block's
// record is served only AFTER the copy into it has completed (publish). So a record (slot s,
// generation g) that is served again after a reader's copy out of s ended proves that no write
// into s began between the first lookup and the second: the copy read exactly the bytes g
// published. Generations only grow (per slot, 64 bits), so g never comes back.
//
//   reserve   scheduler thread: slots for a batch of blocks (those held already are skipped)
//   publish   scheduler thread, after the mover's copies into the slots completed
//   lookup    the peer server's thread: a record per key held
//
// Thread-safe. Cost: a hash lookup per block put or asked for; the bytes move by the mover.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/peer_region.h"
#include "kv/tier_key.h"

namespace strata::kv {

struct PeerSlotsStats {
  int64_t num_put = 0;       // blocks copied into slots
  int64_t num_reused = 0;    // slots taken from an older block
  int64_t num_served = 0;    // records served
  int64_t bytes_served = 0;  // the blocks' bytes those records let readers copy
};

class PeerSlots {
 public:
  // region: at least one slot of block_bytes past its header.
  PeerSlots(std::unique_ptr<PeerRegion> region, uint64_t ns, int64_t block_bytes);

  int32_t num_slots() const { return num_slots_; }
  int64_t block_bytes() const { return block_bytes_; }
  PeerRegion& region() { return *region_; }

  // Slots for hashes[i] (-1 where one holds it already, or where the same hash came earlier in
  // the batch), each forgotten and its generation bumped: unreadable until published. At most
  // num_slots() blocks per call.
  std::vector<int32_t> reserve(std::span<const BlockHash> hashes);
  // The block of a reserved slot, its bytes copied in (completed), readable from now on.
  void publish(int32_t slot, const BlockHash& hash, uint64_t checksum);
  // The reserved slot goes back unpublished (its copy was not made).
  void abandon(int32_t slot);

  // values[i] = key i's slot record where a slot holds it and values[i] is still empty.
  void lookup(std::span<const TierKey> keys, std::vector<std::string>& values);
  // Whether a published slot holds hash (tests).
  bool holds(const BlockHash& hash) const;

  PeerSlotsStats stats() const;

 private:
  struct Slot {
    bool published = false;
    BlockHash hash;
    uint64_t generation = 0;
    uint64_t checksum = 0;
    std::list<int32_t>::iterator use;  // its place in use_ (front: most recent)
  };

  std::unique_ptr<PeerRegion> region_;
  const uint64_t ns_;
  const int64_t block_bytes_;
  const int32_t num_slots_;
  mutable std::mutex mu_;  // guards what follows
  std::vector<Slot> slots_;
  std::list<int32_t> use_;  // every slot, least recently put or served at the back
  std::unordered_map<BlockHash, int32_t> held_;
  PeerSlotsStats stats_;
};

// A prefill instance's PeerBlockLookup (peer_transport.h): slot records from slots (when the
// request accepts them and there are slots), then values from the outbox for the keys left.
class PeerOutbox;
void peer_lookup(PeerSlots* slots, PeerOutbox* outbox, std::span<const TierKey> keys,
                 uint16_t flags, std::vector<std::string>& values);

}  // namespace strata::kv

#pragma once
// BlockSource: where RemoteFetcher reads blocks that no local tier holds -- Redis, shared by
// many instances (RemoteTier), or the prefill instance that computed them (PeerSource). One
// call asks for a list of blocks by chain hash; each comes back decoded into its buffer and
// checked (block_value.h), or as a miss the caller recomputes.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "kv/block_hash.h"

namespace strata::kv {

struct PeerSlotClaim;  // peer_source.h

// One block asked of get(): filled in with status Ok (out and checksum set), NotFound (absent,
// or its value failed a check), or Unavailable (the source did not answer; the caller
// recomputes).
//
// chain: the blocks of one request's prompt share a number, in chain order, and a get's chains
// are independent (a source that stops a chain at its first missing block stops that chain
// only). producing, when set, says the chain's blocks are still being computed elsewhere (a
// prefill instance) while it is true: a source may wait for them (PeerSource does).
//
// claim: set (with status Ok, out untouched, checksum 0) by a source that left the block where
// it is -- a PeerSource taking slot records of a region on this machine -- for the caller to copy
// into its pool and have confirmed (PeerSource::confirm) before it uses it.
struct BlockGet {
  BlockHash hash;
  std::span<const int32_t> tokens;
  std::span<std::byte> out;
  uint64_t checksum = 0;
  Status status;
  int32_t chain = 0;
  const std::atomic<bool>* producing = nullptr;
  std::shared_ptr<const PeerSlotClaim> claim = nullptr;
};

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // Fills in every block (from one thread at a time).
  virtual void get(std::span<BlockGet> blocks) = 0;
};

}  // namespace strata::kv

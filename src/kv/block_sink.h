#pragma once
// BlockSink: where KvTiers hands the blocks it writes down to the host tier, to be shared beyond
// this instance -- Redis (RemoteTier) or the decode instances reading from this prefill
// instance (PeerOutbox). A block is lent, not copied: the sink codes its value from the host
// slot's bytes on a thread of its own and hands the slot's tag back when done, and KvTiers
// keeps the slot pinned until then.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_hash.h"

namespace strata::kv {

class BlockSink {
 public:
  virtual ~BlockSink() = default;
  // Takes (hash, tokens, bytes) without a copy: they must stay as they are until
  // take_released() hands tag back. False when dropped (the sink is behind): nothing was
  // borrowed. From any thread.
  virtual bool put_borrowed(const BlockHash& hash, std::span<const int32_t> tokens,
                            std::span<const std::byte> bytes, uint64_t checksum, uint64_t tag) = 0;
  // The tags of borrowed blocks the sink is done with, since the last call; with wait, first
  // waits until there is one (an empty result then means none is borrowed).
  virtual std::vector<uint64_t> take_released(bool wait = false) = 0;
};

}  // namespace strata::kv

#pragma once
// BlockSource: where RemoteFetcher reads blocks that no local tier holds -- Redis, shared by
// many instances (RemoteTier), or the prefill instance that computed them (PeerSource). One
// call asks for a list of blocks by chain hash; each comes back decoded into its buffer and
// checked (block_value.h), or as a miss the caller recomputes.

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"
#include "kv/block_hash.h"

namespace strata::kv {

// One block asked of get(): filled in with status Ok (out and checksum set), NotFound (absent,
// or its value failed a check), or Unavailable (the source did not answer; the caller
// recomputes).
struct BlockGet {
  BlockHash hash;
  std::span<const int32_t> tokens;
  std::span<std::byte> out;
  uint64_t checksum = 0;
  Status status;
};

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // Fills in every block (from one thread at a time).
  virtual void get(std::span<BlockGet> blocks) = 0;
};

}  // namespace strata::kv

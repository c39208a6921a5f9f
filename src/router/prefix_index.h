#pragma once
// PrefixIndex: what one instance's prefix cache holds, as the router learns it from the
// instance's KV events (docs/router.md).
//
// The events name blocks by the first 8 bytes of their chain hash (kv/block_hash.h), and a chain
// hash names the whole prefix up to its block, so a flat set of hashes answers what a radix tree
// of token blocks would: a prompt's cached prefix on the instance is the longest run of its block
// hashes, from the first, that the set holds. BlockStored adds, BlockRemoved and
// AllBlocksCleared take away. Approximate: events lost without replay leave stale or missing
// entries (the instance still confirms every hit itself), and past kMaxBlocks entries (removals
// missed) the index starts again empty.
//
// Thread-safe: one mutex; apply() from the event thread, match() from request threads. Cost:
// O(events' blocks) per apply, O(matched blocks) per match.

#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_set>

#include "kv/kv_event_wire.h"

namespace strata::router {

class PrefixIndex {
 public:
  static constexpr size_t kMaxBlocks = size_t{1} << 22;

  void apply(const kv::WireKvEventBatch& batch);
  // Forgets everything (the instance restarted: its cache is empty).
  void clear();
  // The number of leading hashes of chain (a prompt's block hashes, first block first) the
  // instance holds.
  int32_t match(std::span<const uint64_t> chain) const;
  // The instance's block size as its events report it; 0 until a BlockStored arrived.
  int32_t block_size() const;
  size_t num_blocks() const;

 private:
  mutable std::mutex mu_;
  std::unordered_set<uint64_t> blocks_;
  int32_t block_size_ = 0;
};

}  // namespace strata::router

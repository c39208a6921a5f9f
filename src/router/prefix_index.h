#pragma once
// PrefixIndex: what one instance's prefix cache holds, as the router learns it from the
// instance's KV events (docs/router.md).
//
// The events name blocks by the first 8 bytes of their chain hash (kv/block_hash.h), and a chain
// hash names the whole prefix up to its block, so a flat set of hashes answers what a radix tree
// of token blocks would: a prompt's cached prefix on the instance is the longest run of its block
// hashes, from the first, that the set holds. BlockStored adds, BlockRemoved and
// AllBlocksCleared take away. Each block is kept with the media it is on (the pool, the host tier,
// the disk tier: a run of blocks that mixes them is still a prefix the instance need not compute);
// the remote medium is not kept, since every instance sharing the pool reads it alike, and
// AllBlocksCleared (the pool's reset) clears only the pool's medium. Approximate: events lost
// without replay leave stale or missing entries (the instance still confirms every hit itself),
// and past kMaxBlocks entries (removals missed) the index starts again empty.
//
// Thread-safe: one mutex; apply() from the event thread, match() from request threads. Cost:
// O(events' blocks) per apply, O(matched blocks) per match.

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>

#include "kv/kv_event_wire.h"

namespace strata::router {

// A prompt's leading blocks an instance holds, by where the best copy of each is.
struct PrefixMatch {
  int32_t device = 0;  // in the pool
  int32_t host = 0;    // in the host tier, not in the pool
  int32_t disk = 0;    // on disk only
  int32_t blocks() const { return device + host + disk; }
};

class PrefixIndex {
 public:
  static constexpr size_t kMaxBlocks = size_t{1} << 22;

  void apply(const kv::WireKvEventBatch& batch);
  // Forgets everything (the instance restarted: its cache is empty).
  void clear();
  // The leading hashes of chain (a prompt's block hashes, first block first) the instance holds
  // on any medium it reports, counted by the best one of each (pool, then host, then disk).
  PrefixMatch match(std::span<const uint64_t> chain) const;
  // The instance's block size as its events report it; 0 until a BlockStored arrived.
  int32_t block_size() const;
  // Blocks on the medium (kDevice, kHost or kDisk).
  size_t num_blocks(kv::KvMedium medium = kv::KvMedium::kDevice) const;

 private:
  static uint8_t bit(kv::KvMedium m) { return static_cast<uint8_t>(1u << static_cast<int>(m)); }
  void add(uint64_t hash, kv::KvMedium m);
  void remove(uint64_t hash, kv::KvMedium m);

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint8_t> blocks_;  // hash -> its media, a bit each
  std::array<size_t, 3> num_by_medium_{};        // kDevice, kHost, kDisk
  int32_t block_size_ = 0;
};

}  // namespace strata::router

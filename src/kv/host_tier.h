#pragma once
// HostTier: the host-memory KV tier under the pool (docs/kv.md, "KV tiers"). Blocks the pool
// evicts from its prefix cache land here, in a buffer with the pool's own layout (so a
// BlockMover moves a block in one piece, pinned on the GPU), indexed by TierKey; when the tier is
// full the least recently used block makes room (the caller looks at least_recent() first, to
// write it down to the disk tier).
//
// A pinned slot is never taken for another block: the tiers pin a slot while an I/O thread reads
// or writes its bytes, or while a stage copies it up; pins nest, so a block being written down
// (to disk or Redis) can be staged at the same time, both only reading its bytes. Each slot
// keeps its key, its token ids (every hit confirms them) and the XXH3 checksum of its bytes
// recorded when they were written (commit), which verify() checks before a block goes back up. Owns its buffer. Not thread-safe: the scheduler thread owns the
// bookkeeping (I/O threads touch only pinned slots' bytes). Cost: O(1) per operation plus one
// checksum pass over block_bytes per commit / verify.

#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/thread_pool.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_events.h"
#include "kv/tier_key.h"

namespace strata::kv {

class HostTier {
 public:
  // capacity_blocks >= 1 blocks of layout; slots are buffer blocks 0 .. capacity_blocks - 1.
  HostTier(const KvLayout& layout, int32_t capacity_blocks);

  int32_t capacity() const { return static_cast<int32_t>(slots_.size()); }
  int32_t num_blocks() const { return static_cast<int32_t>(index_.size()); }
  HostKvBuffer& buffer() { return buffer_; }
  const HostKvBuffer& buffer() const { return buffer_; }
  int64_t block_bytes() const { return buffer_.layout().block_bytes(); }

  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_pinned() const { return num_pinned_; }

  // The committed slot holding key with these token ids, made the most recently used (unless
  // pinned); nullopt when absent or not committed yet. An entry under the key whose tokens
  // differ is dropped (it can never be served) unless it is pinned.
  std::optional<BlockId> find(const TierKey& key, std::span<const int32_t> tokens);
  // Committed or not.
  bool contains(const TierKey& key) const { return index_.contains(key); }
  // Inserted, not committed yet (an I/O thread is filling it).
  bool pending(const TierKey& key) const;

  // The slot insert() would take when no slot is free: the least recently used unpinned one;
  // nullopt when every used slot is pinned.
  std::optional<BlockId> least_recent() const;
  // A slot for key (absent from the tier): a free one, else least_recent(), whose entry is
  // dropped; nullopt when neither exists. The caller writes the block's bytes into the slot and
  // then calls commit(slot); until then the slot is not found.
  std::optional<BlockId> insert(const TierKey& key, std::span<const int32_t> tokens);
  // A pinned slot is never taken by insert() nor dropped but by erase(). Pins nest: the slot
  // goes back among those insert() may take when every pin is undone.
  void pin(BlockId slot);
  // Undoes one pin; at the last, the slot goes back as the most recently used, or as the least
  // (a block just written down, which may go first), or to the free slots when it was erased
  // meanwhile.
  void unpin(BlockId slot, bool least_recent = false);
  bool pinned(BlockId slot) const { return slot_ref(slot).pins > 0; }
  bool committed(BlockId slot) const { return slot_ref(slot).committed; }
  const TierKey& key(BlockId slot) const { return slot_ref(slot).key; }
  // When the slot's entry was inserted: its age when it is taken for another is how long a
  // block that nobody asks for lives in the tier.
  std::chrono::steady_clock::time_point inserted_at(BlockId slot) const {
    return slot_ref(slot).inserted_at;
  }
  std::span<const int32_t> tokens(BlockId slot) const { return slot_ref(slot).tokens; }
  uint64_t checksum(BlockId slot) const { return slot_ref(slot).checksum; }
  // Records the checksum of the slot's bytes and makes the entry findable.
  void commit(BlockId slot);
  // The same with the checksum already known: a block read from disk, which checked it; a
  // prefetched one is remembered as such until take_prefetched() or until it is dropped.
  void commit(BlockId slot, uint64_t checksum, bool prefetched = false);
  // Whether the slot's block was prefetched from disk and not served since; clears it.
  bool take_prefetched(BlockId slot);
  // Slots holding a prefetched block not served yet.
  int32_t num_prefetched() const { return num_prefetched_; }
  // True when the slot's bytes still have the checksum commit() recorded.
  bool verify(BlockId slot) const;
  // The same for many slots, their checksums computed on pool's threads (null: this thread).
  void commit(std::span<const BlockId> slots, ThreadPool* pool);
  // A committed slot's bytes and recorded checksum, for verify()'s check on another thread
  // (verified_prefix), which may run while the slot stays pinned.
  struct Check {
    std::span<const std::byte> bytes;
    uint64_t checksum = 0;
  };
  Check check_of(BlockId slot) const;
  // How many of checks, from the first, still hash to their checksum, on pool's threads (null:
  // this one). Touches no tier state.
  static size_t verified_prefix(std::span<const Check> checks, ThreadPool* pool);
  // Drops the slot's entry (a block that failed verify, or one nobody may use) and the caller's
  // pin, if it holds one. A slot other pins still hold is not found any more, and is free once
  // they are undone.
  void erase(BlockId slot);

  std::span<std::byte> bytes(BlockId slot);
  std::span<const std::byte> bytes(BlockId slot) const;

  // Borrowed; null = none. Hears of every block committed (stored) and of every committed block
  // dropped (removed), as medium kHost, from then on.
  void set_event_sink(KvEventSink* sink) { event_sink_ = sink; }

  // Aborts on a broken invariant (index, LRU order, pins and free slots agree). O(capacity).
  void check_invariants() const;

 private:
  struct Slot {
    bool used = false;
    bool committed = false;
    int32_t pins = 0;        // pinned: out of the LRU list
    bool erased = false;     // out of the index, pinned: free at the last unpin
    bool prefetched = false;  // read from disk by a prefetch, not served since
    TierKey key;
    std::vector<int32_t> tokens;
    uint64_t checksum = 0;
    std::chrono::steady_clock::time_point inserted_at;
    std::list<int32_t>::iterator lru;  // valid when used and not pinned
  };

  Slot& slot(BlockId id) { return slots_.at(static_cast<size_t>(id.value)); }
  const Slot& slot_ref(BlockId id) const { return slots_.at(static_cast<size_t>(id.value)); }
  void release(int32_t idx);
  // The slot's block becomes findable: its KV event.
  void committed_now(Slot& s);

  HostKvBuffer buffer_;
  std::vector<Slot> slots_;
  std::vector<int32_t> free_;                                  // unused slots
  std::list<int32_t> lru_;                                     // unpinned used slots, least recent first
  int32_t num_pinned_ = 0;  // slots with pins, erased ones included
  int32_t num_prefetched_ = 0;
  KvEventSink* event_sink_ = nullptr;
  std::unordered_map<TierKey, int32_t, TierKeyHasher> index_;  // committed and pending entries
};

}  // namespace strata::kv

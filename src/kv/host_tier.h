#pragma once
// HostTier: the host-memory KV tier under the pool (docs/kv.md, "KV tiers"). Blocks the pool
// evicts from its prefix cache land here, in a buffer with the pool's own layout (so a
// BlockMover moves a block in one piece, pinned on the GPU), indexed by TierKey; when the tier is
// full the least recently used block makes room, and the caller may write it down to the disk
// tier first (its bytes stay in the slot until the caller overwrites them).
//
// Each slot keeps its key, its token ids (every hit confirms them) and the XXH3 checksum of its
// bytes recorded when they were written (commit), which verify() checks before a block goes back
// up. Owns its buffer. Not thread-safe: the scheduler thread owns it. Cost: O(1) per operation
// plus one checksum pass over block_bytes per commit / verify.

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/thread_pool.h"
#include "kv/host_kv_buffer.h"
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

  // The slot holding key with these token ids, made the most recently used; nullopt when absent.
  // An entry under the key whose tokens differ is dropped (it can never be served).
  std::optional<BlockId> find(const TierKey& key, std::span<const int32_t> tokens);
  bool contains(const TierKey& key) const { return index_.contains(key); }

  // What a slot held when insert() took it for another block.
  struct Dropped {
    TierKey key;
    std::vector<int32_t> tokens;
    uint64_t checksum = 0;  // of its bytes, still in the slot until the caller overwrites them
  };
  // A slot for key (absent from the tier): a free one, else the least recently used one, whose
  // entry goes to *dropped (null: dropped silently). The caller writes the block's bytes into the
  // slot and then calls commit(slot); until then the slot is not found.
  BlockId insert(const TierKey& key, std::span<const int32_t> tokens,
                 std::optional<Dropped>* dropped);
  // Records the checksum of the slot's bytes and makes the entry findable.
  void commit(BlockId slot);
  // The same with the checksum already known (a block read from disk, which checked it).
  void commit(BlockId slot, uint64_t checksum);
  // True when the slot's bytes still have the checksum commit() recorded.
  bool verify(BlockId slot) const;
  // The same for many slots, their checksums computed on pool's threads (null: this thread).
  void commit(std::span<const BlockId> slots, ThreadPool* pool);
  // How many of slots, from the first, verify(); the rest start at the first that does not.
  size_t verify_prefix(std::span<const BlockId> slots, ThreadPool* pool) const;
  // Drops the slot's entry (a block that failed verify, or one nobody may use).
  void erase(BlockId slot);

  std::span<std::byte> bytes(BlockId slot);
  std::span<const std::byte> bytes(BlockId slot) const;

  // Aborts on a broken invariant (index, LRU order and free slots agree). O(capacity).
  void check_invariants() const;

 private:
  struct Slot {
    bool used = false;
    bool committed = false;
    TierKey key;
    std::vector<int32_t> tokens;
    uint64_t checksum = 0;
    std::list<int32_t>::iterator lru;  // valid when used
  };

  Slot& slot(BlockId id) { return slots_.at(static_cast<size_t>(id.value)); }
  const Slot& slot(BlockId id) const { return slots_.at(static_cast<size_t>(id.value)); }
  void release(int32_t idx);

  HostKvBuffer buffer_;
  std::vector<Slot> slots_;
  std::vector<int32_t> free_;                                  // unused slots
  std::list<int32_t> lru_;                                     // used slots, least recent first
  std::unordered_map<TierKey, int32_t, TierKeyHasher> index_;  // committed and pending entries
};

}  // namespace strata::kv

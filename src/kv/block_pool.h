#pragma once
// BlockPool: the allocator of KV blocks, shared by every sequence of one model instance.
//
// Owns one BlockMeta per block (ref count and free-queue links); the K/V bytes themselves live in
// a separate buffer laid out by KvLayout. Blocks are indices, not objects: the free queue is a
// doubly linked list threaded through the metadata vector (vLLM's FreeKVCacheBlockQueue), so
// allocate (pop front), free (push back) and removal from the middle are all O(1) with no heap
// allocation. The queue order is the reuse order: a freed block goes to the back, so the blocks
// freed longest ago are reused first -- the eviction order of cached blocks once prefix caching
// keeps freed blocks' contents (the KV space layer builds on exactly this queue).
//
// Invariants (check_invariants() verifies them all):
//   - BlockId{0} is the reserved null block: never allocated, never freed, ref count 0, never in
//     the queue. Padding entries of a block table may point at it.
//   - A block is in the free queue iff its ref count is 0.
//   - num_free_blocks() equals the queue length; prev/next links are symmetric.
// Capacity changes are transactional: allocate(n) either returns n blocks or changes nothing.
//
// Thread-safety: none; the scheduler owns the pool and is single-threaded.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/ids.h"

namespace strata::kv {

class BlockPool {
 public:
  // num_blocks counts the null block, so num_blocks - 1 blocks are allocatable. num_blocks >= 1.
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t num_free_blocks() const { return num_free_; }
  // Allocated blocks, excluding the null block.
  int32_t num_used_blocks() const { return num_blocks() - 1 - num_free_; }

  // Side-effect free: true iff allocate(n) would succeed now.
  bool can_allocate(int32_t n) const { return n >= 0 && n <= num_free_; }

  // Takes n blocks from the front of the free queue, each with ref count 1, in queue order.
  // nullopt (and no change at all) when fewer than n are free.
  [[nodiscard]] std::optional<std::vector<BlockId>> allocate(int32_t n);

  // Adds one reference to each block (sharing it with another sequence). Blocks must be in use.
  void add_ref(std::span<const BlockId> blocks);

  // Drops one reference from each block; a block whose count reaches 0 goes to the back of the
  // free queue. Blocks are released in the order given. The null block is ignored.
  void free(std::span<const BlockId> blocks);

  int32_t ref_count(BlockId block) const;

  // The free queue front to back (for tests and debugging; O(free blocks)).
  std::vector<BlockId> free_queue() const;

  // Aborts with a message on any violated invariant. O(num_blocks).
  void check_invariants() const;

 private:
  static constexpr int32_t kNone = -1;

  struct BlockMeta {
    int32_t ref_count = 0;
    int32_t prev_free = kNone;  // free-queue links; kNone at the ends and when not queued
    int32_t next_free = kNone;
    bool in_queue = false;
  };

  void push_back(int32_t idx);
  void remove(int32_t idx);

  std::vector<BlockMeta> meta_;
  int32_t head_ = kNone;  // front of the free queue: next to be reused
  int32_t tail_ = kNone;
  int32_t num_free_ = 0;
};

}  // namespace strata::kv

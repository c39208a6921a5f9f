#pragma once
// BlockPool: the allocator of KV blocks and the index of the prefix cache, shared by every
// sequence of one model instance.
//
// Owns one BlockMeta per block (ref count, free-queue links, block hash and prefix-cache links),
// the token ids of every cached block (to confirm hits), and the hash -> block index; the K/V
// bytes themselves live in a separate buffer laid out by KvLayout. Blocks are indices, not
// objects: the free queue is a doubly linked list threaded through the metadata vector (vLLM's
// FreeKVCacheBlockQueue), so allocate (pop front), free (push back) and removal from the middle
// (touching a free cached block) are all O(1) with no heap allocation. The queue order is the
// reuse order and therefore the eviction order: a freed block goes to the back, keeping its
// content and hash, so the block freed longest ago is evicted first (LRU).
//
// Prefix caching (BlockPoolConfig::enable_prefix_caching): a full, computed block is registered
// with cache_block() under its BlockHash (block_hash.h) together with its token ids, parent block
// and extra keys. find_cached() confirms a candidate against all three, so a hash collision can
// never serve another prompt's KV: the first block's salt and tokens are checked, and every later
// block's parent is the block the lookup just confirmed, so the whole chain is verified. Blocks
// whose hashes collide are chained through BlockMeta::hash_next. Reallocating a cached block
// evicts it (BlockRemoved event, eviction counter).
//
// Invariants (check_invariants() verifies them all):
//   - BlockId{0} is the reserved null block: never allocated, never freed, ref count 0, never in
//     the queue, never cached. Padding entries of a block table may point at it.
//   - A block is in the free queue iff its ref count is 0.
//   - num_free_blocks() equals the queue length; prev/next links are symmetric.
//   - A block is cached iff it is reachable exactly once from the hash index under its own hash;
//     num_cached_blocks() counts them.
// Capacity changes are transactional: allocate(n) either returns n blocks or changes nothing.
//
// Thread-safety: none; the scheduler owns the pool and is single-threaded.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/kv_events.h"

namespace strata::kv {

// A cached block the pool evicts, with what identifies its content (its bytes are still intact
// when the listener hears of it).
struct EvictedBlock {
  BlockId block;
  BlockHash hash;
  std::vector<int32_t> tokens;
};

// Told what enters and leaves the prefix cache (the KV tiers, kv_tiers.h):
//   on_cached   a block cache_block() registered (its bytes are the computed ones: the caller
//               caches a block after the forward pass that wrote it)
//   on_evicted  the cached blocks an allocate() evicts, once per call that evicts any, before it
//               returns -- while no one has written the blocks yet
class PoolListener {
 public:
  virtual ~PoolListener() = default;
  virtual void on_cached(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens) = 0;
  virtual void on_evicted(std::span<const EvictedBlock> blocks) = 0;
};

struct BlockPoolConfig {
  int32_t num_blocks = 1;   // counts the null block; >= 1
  int32_t block_size = 16;  // tokens per block (the token ids a cached block keeps)
  bool enable_prefix_caching = false;
  KvEventSink* event_sink = nullptr;  // borrowed; nullptr = no events
};

class BlockPool {
 public:
  // num_blocks counts the null block, so num_blocks - 1 blocks are allocatable. num_blocks >= 1.
  // Prefix caching off.
  explicit BlockPool(int32_t num_blocks);
  explicit BlockPool(const BlockPoolConfig& config);

  int32_t num_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int32_t num_free_blocks() const { return num_free_; }
  // Allocated blocks, excluding the null block.
  int32_t num_used_blocks() const { return num_blocks() - 1 - num_free_; }

  // Side-effect free: true iff allocate(n) would succeed now.
  bool can_allocate(int32_t n) const { return n >= 0 && n <= num_free_; }

  // Takes n blocks from the front of the free queue, each with ref count 1, in queue order;
  // cached ones among them are evicted. nullopt (and no change at all) when fewer than n are free.
  [[nodiscard]] std::optional<std::vector<BlockId>> allocate(int32_t n);

  // Adds one reference to each block (sharing it with another sequence). Blocks must be in use.
  void add_ref(std::span<const BlockId> blocks);

  // Drops one reference from each block; a block whose count reaches 0 goes to the back of the
  // free queue (a cached block keeps its content and hash). Blocks are released in the order
  // given. The null block is ignored.
  void free(std::span<const BlockId> blocks);

  int32_t ref_count(BlockId block) const;

  // ---- prefix cache (requires prefix_caching()) ------------------------------------------------

  // The cached block with this hash whose stored tokens, parent block and extra keys equal the
  // query's (parent == kNullBlock for a sequence's first block), or nullopt. A parent counts only
  // in the caching it had when the block was registered (cache_gen), so a parent that was evicted
  // and cached again with other content confirms nothing. Side-effect free.
  std::optional<BlockId> find_cached(const BlockHash& hash, BlockId parent,
                                     std::span<const int32_t> tokens,
                                     const BlockExtraKeys& extra) const;

  // Takes one reference to each cached block (a prefix hit); a free one leaves the free queue,
  // O(1) each. Takes from the free count exactly the blocks whose ref count was 0. The null block
  // is ignored.
  void touch(std::span<const BlockId> blocks);

  // Registers an in-use, uncached, full block (tokens.size() == block_size) under hash, and emits
  // BlockStored. parent (kNullBlock and parent_hash nullptr for a first block) must be the cached
  // block holding the previous tokens. Returns false, changing nothing, when an identical block
  // (same hash, tokens, parent, extra keys) is already cached or the parent is not cached.
  bool cache_block(BlockId block, const BlockHash& hash, const BlockHash* parent_hash,
                   BlockId parent, std::span<const int32_t> tokens, const BlockExtraKeys& extra);

  bool is_cached(BlockId block) const;
  // Bumped each time the block is cached: equal generations mean the same cached content.
  uint32_t cache_gen(BlockId block) const { return meta(block.value).cache_gen; }
  int32_t num_cached_blocks() const { return num_cached_; }
  // Cached blocks whose content was dropped because the block was reallocated.
  int64_t num_evictions() const { return num_evictions_; }
  // Borrowed; null = none. Hears of every caching and eviction from then on.
  void set_listener(PoolListener* listener) { listener_ = listener; }
  // Borrowed; null = none. Gets the KV events of every caching, eviction and reset from then on.
  void set_event_sink(KvEventSink* sink) { event_sink_ = sink; }

  // Drops every cached block's content and hash at once (AllBlocksCleared, no BlockRemoved per
  // block, no eviction counted; the listener hears nothing). Only when no block is in use:
  // returns false, changing nothing, while any is. O(num_blocks).
  bool reset_prefix_cache();

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
    bool cached = false;
    int32_t hash_next = kNone;  // next cached block with the same hash
    int32_t parent = 0;         // cached only: the parent block (0 = first block)
    uint32_t parent_gen = 0;    // cached only: the parent's cache_gen when this block was cached
    uint32_t cache_gen = 0;     // bumped each time the block is cached: a reallocated parent
                                // never vouches for children cached under its old content
    int32_t adapter_id = 0;     // cached only
    BlockHash hash;             // cached only
  };

  BlockMeta& meta(int32_t idx) { return meta_[static_cast<size_t>(idx)]; }
  const BlockMeta& meta(int32_t idx) const { return meta_[static_cast<size_t>(idx)]; }
  std::span<const int32_t> stored_tokens(int32_t idx) const;
  bool matches(int32_t idx, BlockId parent, std::span<const int32_t> tokens,
               const BlockExtraKeys& extra) const;
  void push_back(int32_t idx);
  void remove(int32_t idx);
  void evict(int32_t idx);
  // Clears block idx's cache fields and salt (not the hash index or the counters).
  void forget_cached(int32_t idx);
  void check_cache_invariants() const;

  std::vector<BlockMeta> meta_;
  int32_t head_ = kNone;  // front of the free queue: next to be reused
  int32_t tail_ = kNone;
  int32_t num_free_ = 0;

  int32_t block_size_ = 0;
  bool prefix_caching_ = false;
  KvEventSink* event_sink_ = nullptr;
  std::unordered_map<BlockHash, int32_t> hash_to_block_;  // head of each hash's chain
  std::vector<int32_t> tokens_;     // [num_blocks * block_size] when caching is on
  std::vector<std::string> salts_;  // per block, first blocks only (cache salt)
  int32_t num_cached_ = 0;
  int64_t num_evictions_ = 0;
  PoolListener* listener_ = nullptr;
  std::vector<EvictedBlock> evicted_;  // this allocate()'s, for the listener
};

}  // namespace strata::kv

#pragma once
// KvCacheManager: the KV space layer's interface to a scheduler -- what a request's block table
// needs, per step, from the pool and the prefix cache (vLLM's KVCacheManager, in a smaller form).
//
//   find_cached_prefix(tokens)      longest cached prefix, whole blocks, confirmed block by block
//   can_allocate / allocate_slots   admission and growth: the prefix hit's blocks, copy-on-write
//                                   of a shared partly filled last block, new blocks -- all or none
//   cache_full_blocks(table)        after a step: register newly full computed blocks
//   fork(parent, child)             share every block (n > 1, beam search)
//   free_blocks_before(table, pos)  sliding window: give back blocks no query reads any more
//   free(table)                     give the blocks back, tail first
//   adopt_blocks(table, ...)        a swapped-in sequence's table, on fresh blocks
//   take_pending_copies()           the (src, dst) block copies the next step must do first
//
// Owns the BlockPool, a BlockHasher and the prefix-cache counters; borrows the block tables (the
// sequences own them) and the event sink. Invariants: every table it manages holds one reference
// per block entry; a table's leading num_cached_blocks() blocks are cached in the pool (or were
// when registered: eviction only happens once every reference is gone). Not thread-safe: the
// scheduler thread owns it. Cost: O(blocks touched) per call, plus one SHA-256 per full block
// hashed (each block of a sequence is hashed once).

#include <cstdint>
#include <span>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_events.h"

namespace strata::kv {

struct KvCacheConfig {
  int32_t num_blocks = 1;  // counts the null block
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  int32_t hash_bits = 256;            // < 256 only in tests (forced collisions)
  // > 0 when every layer attends to at most this many positions (kv::pool_sliding_window): a
  // prefix hit then leaves the blocks before its last window out, and free_blocks_before() gives
  // back what a growing sequence no longer reads.
  int32_t sliding_window = 0;
  KvEventSink* event_sink = nullptr;  // borrowed
};

// A request's cached prefix: blocks[i] holds tokens [i * block_size, (i + 1) * block_size).
struct PrefixHit {
  std::vector<BlockId> blocks;
  std::vector<BlockHash> hashes;  // hashes[i] is blocks[i]'s hash
  int32_t num_tokens = 0;         // blocks.size() * block_size
};

// One block copy a step must run before its forward pass (the bytes live in the KV buffer).
struct BlockCopy {
  BlockId src;
  BlockId dst;
  bool operator==(const BlockCopy&) const = default;
};

struct PrefixCacheStats {
  int64_t num_queries = 0;        // find_cached_prefix calls
  int64_t num_query_tokens = 0;   // prompt tokens looked up
  int64_t num_hit_tokens = 0;     // of which served from the cache
  int64_t num_evictions = 0;      // cached blocks dropped for reuse
  int32_t num_cached_blocks = 0;  // now
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int32_t block_size() const { return pool_.block_size(); }
  bool prefix_caching() const { return pool_.prefix_caching(); }

  // The longest cached prefix of tokens, in whole blocks, leaving at least the last token to
  // compute (a step needs it to produce logits). Nothing is referenced yet; the only side effect
  // is the query counters. Empty when prefix caching is off. With a sliding window, the whole
  // chain is still confirmed, but the entries wholly before the window of the first position to
  // compute are kNullBlock: the table will not take them.
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens, const BlockExtraKeys& extra);

  // Blocks allocate_slots(table, num_new_tokens, hit) would take from the free queue, the hit's
  // currently free blocks included. Side-effect free.
  int32_t num_blocks_to_allocate(const BlockTable& table, int32_t num_new_tokens,
                                 const PrefixHit* hit = nullptr) const;
  bool can_allocate(const BlockTable& table, int32_t num_new_tokens,
                    const PrefixHit* hit = nullptr) const {
    return num_blocks_to_allocate(table, num_new_tokens, hit) <= pool_.num_free_blocks();
  }

  // Gives the table slots for num_new_tokens more tokens. With a hit, the table must be empty: it
  // first takes the hit's blocks (a reference each), so it ends with hit->num_tokens +
  // num_new_tokens slots. If the table's last block is partly filled and shared, it is replaced
  // by a fresh copy (queued in pending copies) before new tokens land in it. Returns false, and
  // changes neither the pool nor the table, when too few blocks are free. A hit is valid until
  // the pool next changes: look it up and allocate in the same scheduling decision.
  [[nodiscard]] bool allocate_slots(BlockTable& table, int32_t num_new_tokens,
                                    const PrefixHit* hit = nullptr);

  // Registers the table's full blocks among its first num_computed tokens (whose K/V the step has
  // written) in the prefix cache. tokens: the sequence's ids, at least num_computed of them.
  void cache_full_blocks(BlockTable& table, std::span<const int32_t> tokens, int32_t num_computed,
                         const BlockExtraKeys& extra);

  // child (empty) shares every block of parent: one more reference each, same token count and
  // hashes. The first append into a shared partly filled block copies it (allocate_slots).
  void fork(const BlockTable& parent, BlockTable& child);

  // Sliding-window attention: drops the table's references to the blocks that hold only positions
  // before first_needed_pos (no query of this or a later step reads them) and points those
  // entries at the null block, so a sequence holds at most ceil(window / block_size) + 1 blocks
  // however long it grows. The last block is always kept. A freed block that was cached stays in
  // the prefix cache until it is evicted. Cost: O(blocks freed); a table's skipped blocks are
  // remembered.
  void free_blocks_before(BlockTable& table, int32_t first_needed_pos);
  // The same for the configured sliding window, before a step computes the table's next token
  // (position table.num_tokens()): call it before allocate_slots. No-op without a window.
  void free_blocks_outside_window(BlockTable& table) {
    if (window_ > 0) free_blocks_before(table, table.num_tokens() - window_ + 1);
  }

  // Swap-in: the empty table takes blocks -- allocated from this pool (one reference each) and
  // holding the positions' K/V again, kNullBlock for entries a sliding window had skipped -- for
  // num_tokens positions. Its blocks are not registered in the prefix cache again.
  void adopt_blocks(BlockTable& table, std::vector<BlockId> blocks, int32_t num_tokens);

  // Drops the table's references, last block first: a sequence's tail is evicted before the
  // prefix other requests are likelier to share. Empties the table.
  void free(BlockTable& table);

  // The copies queued by copy-on-write since the last call, in order; the caller runs them (e.g.
  // copy_blocks() in block_copy.h) before the next forward pass.
  std::vector<BlockCopy> take_pending_copies();

  PrefixCacheStats stats() const;

 private:
  bool needs_copy_on_write(const BlockTable& table, int32_t num_new_tokens) const;

  BlockPool pool_;
  BlockHasher hasher_;
  int32_t window_ = 0;
  std::vector<BlockCopy> pending_copies_;
  PrefixCacheStats stats_;
};

}  // namespace strata::kv

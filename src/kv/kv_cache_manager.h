#pragma once
// KvCacheManager: the KV space layer's interface to a scheduler -- what a request's block table
// needs, per step, from the pools and the prefix cache (vLLM's KVCacheManager, in a smaller form).
//
//   find_cached_prefix(tokens)      longest cached prefix, whole blocks, confirmed block by block
//   can_allocate / allocate_slots   admission and growth: the prefix hit's blocks, copy-on-write
//                                   of a shared partly filled last block, new blocks -- all or none
//   cache_full_blocks(table)        after a step: register newly full computed blocks
//   fork(parent, child)             share every block (n > 1, beam search)
//   free_unneeded_blocks(table)     give back blocks no later query reads (windows, INT4)
//   evict_blocks(table, entries)    token eviction: drop whole blocks from the middle of a row
//   free(table)                     give the blocks back, tail first
//   blocks_to_swap / adopt_blocks   a swapped-out sequence's rows, and a swapped-in table's
//   take_pending_copies(g)          the (src, dst) block copies the next step must do first
//
// KV cache groups (kv_group.h, docs/kv.md "KV cache groups"): the manager drives one
// KvGroupManager per group, each with its own pool, and every table has one row per group.
// Group 0 holds the prefix cache's hash chain (and emits the KV events); a later group caches
// its full blocks as copies linked to group 0's (kv_group_manager.h), and a hit is cut to the
// longest prefix for which every group has the blocks the first computed position reads (a
// window's last blocks, an INT4 cache's newest full-precision ones). Admission and growth
// account for every group at once, all or nothing. A plain model has one group (full attention,
// or a sliding window when every layer has one); an INT4 cache adds a newest-blocks group at
// full precision (docs/kv.md, "INT4's newest-blocks group").
//
// Owns the groups' managers, a BlockHasher and the prefix-cache counters; borrows the block
// tables (the sequences own them) and the event sink. Invariants: every table it manages holds
// one reference per non-null entry of each row, and every row covers the table's blocks; a
// table's leading num_cached_blocks() blocks of group 0 are cached in its pool (or were when
// registered: eviction only happens once every reference is gone). Not thread-safe: the
// scheduler thread owns it. Cost: O(blocks touched) per call, plus one SHA-256 per full block
// hashed (each block of a sequence is hashed once).

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_events.h"
#include "kv/kv_group.h"
#include "kv/kv_group_manager.h"
#include "kv/kv_layout.h"

namespace strata::kv {

// A compaction planned but not yet copied (KvCacheManager::plan_compaction): the token copies
// to run, and the blocks the table gave up, whose references the plan holds until
// release_compacted() -- some are the copies' sources, so none may be allocated (and written)
// again before the copies are done.
struct CompactionPlan {
  std::vector<SlotCopy> copies;
  std::vector<BlockId> released;
};

struct KvGroupConfig {
  KvGroupSpec spec;
  int32_t num_blocks = 1;  // its pool's blocks, the null block included
};

struct KvCacheConfig {
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  int32_t hash_bits = 256;            // < 256 only in tests (forced collisions)
  KvEventSink* event_sink = nullptr;  // borrowed; group 0's blocks only
  // At least one; group 0 is a full-attention or sliding-window group.
  std::vector<KvGroupConfig> groups;
};

// A request's cached prefix: rows[g][i] holds tokens [i * block_size, (i + 1) * block_size) in
// group g, kNullBlock where the group does not need the block for the first computed position
// (before a window; an INT4 cache's full-precision blocks before the newest R - 1).
struct PrefixHit {
  std::vector<std::vector<BlockId>> rows;
  std::vector<BlockHash> hashes;  // hashes[i] is block i's hash
  int32_t num_tokens = 0;         // blocks().size() * block_size

  std::span<const BlockId> blocks(int32_t group = 0) const {
    return static_cast<size_t>(group) < rows.size()
               ? std::span<const BlockId>(rows[static_cast<size_t>(group)])
               : std::span<const BlockId>();
  }
  bool empty() const { return num_tokens == 0; }
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

  int32_t num_groups() const { return static_cast<int32_t>(groups_.size()); }
  const KvGroupSpec& group_spec(int32_t g) const { return group(g).spec(); }
  BlockPool& pool(int32_t g = 0) { return group(g).pool(); }
  const BlockPool& pool(int32_t g = 0) const { return group(g).pool(); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return pool().prefix_caching(); }
  // The block hashes' width (256 but in collision tests): a second hasher must match it.
  int32_t hash_bits() const { return hasher_.num_bits(); }

  // The longest cached prefix of tokens, in whole blocks, leaving at least the last token to
  // compute (a step needs it to produce logits). Nothing is referenced yet; the only side effect
  // is the query counters. Empty when prefix caching is off. Group 0's whole chain is confirmed;
  // the hit is then cut to the longest h blocks for which every later group has live cached
  // copies of the blocks its kind reads at position h x block_size, and each row keeps only
  // those (kNullBlock before them; group 0 too, when it is a window).
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens, const BlockExtraKeys& extra);
  // The two halves of find_cached_prefix, neither counting a query (the KV tiers go on from the
  // first and ask the second again once they have brought blocks back):
  //   cached_chain   group 0's confirmed chain, every block of it (rows[0] has no null entry),
  //                  before any cut
  //   hit_of         a chain (cached_chain's, perhaps longer now) cut and filled as
  //                  find_cached_prefix cuts and fills it
  PrefixHit cached_chain(std::span<const int32_t> tokens, const BlockExtraKeys& extra);
  PrefixHit hit_of(PrefixHit chain) const;

  // ---- groups after the first: their cached copies of group 0's blocks ------------------------
  // Group g's live cached copy of group 0's cached block primary, if any.
  std::optional<BlockId> group_copy(int32_t g, BlockId primary) const;
  // Caches group g's in-use block `copy` (holding primary's positions, hash and tokens) and links
  // it to primary, a cached block of group 0, as cache_full_blocks does for a computed block.
  // False when primary has a live copy already or an identical block is cached.
  bool cache_group_copy(int32_t g, BlockId copy, BlockId primary, const BlockHash& hash,
                        std::span<const int32_t> tokens, const BlockExtraKeys& extra);

  // Blocks allocate_slots(table, num_new_tokens, hit) would take from group g's free queue, the
  // hit's currently free blocks included. Side-effect free.
  int32_t num_blocks_to_allocate(const BlockTable& table, int32_t num_new_tokens,
                                 const PrefixHit* hit = nullptr, int32_t g = 0) const;
  // Whether allocate_slots would succeed with, in every group sized by memory
  // (KvGroupSpec::sized_by_memory), ceil(watermark x its allocatable blocks) left free.
  bool can_allocate(const BlockTable& table, int32_t num_new_tokens, const PrefixHit* hit = nullptr,
                    double watermark = 0.0) const;
  // The blocks admission keeps free in group g: ceil(watermark x its allocatable blocks) in a
  // group sized by memory, none in one sized by the scheduler's limits.
  int32_t watermark_blocks(int32_t g, double watermark) const;

  // Gives the table slots for num_new_tokens more tokens, in every group. With a hit, the table
  // must be empty: it first takes the hit's rows (a reference each), so it ends with
  // hit->num_tokens + num_new_tokens slots. A shared, partly filled last block is replaced by a
  // fresh copy (queued in pending copies) before new tokens land in it. Returns false, and
  // changes neither the pools nor the table, when too few blocks are free in some group. A hit is
  // valid until the pools next change: look it up and allocate in the same scheduling decision.
  // Each row's leading blocks that no query from the first new position on reads go back first
  // (and count as free for the allocation).
  [[nodiscard]] bool allocate_slots(BlockTable& table, int32_t num_new_tokens,
                                    const PrefixHit* hit = nullptr);

  // Registers the table's full blocks among its first num_computed tokens (whose K/V the step has
  // written) in the prefix cache (and each later group's copies of them). tokens: the sequence's
  // ids, at least num_computed of them.
  void cache_full_blocks(BlockTable& table, std::span<const int32_t> tokens, int32_t num_computed,
                         const BlockExtraKeys& extra);

  // child (empty) shares every block of parent in every group: one more reference each, same
  // token count and hashes. The first append into a shared partly filled block copies it.
  void fork(const BlockTable& parent, BlockTable& child);

  // Gives back, in every group, the entries no query at position next_pos or later reads
  // (KvGroupSpec::first_needed_block), pointing them at the null block: a windowed sequence then
  // holds at most ceil(window / block_size) + 1 blocks and an INT4 one R full-precision blocks
  // between steps, however long it grows. A freed block that was cached stays in the prefix cache
  // until it is evicted. Cost: O(blocks freed).
  void free_unneeded_blocks(BlockTable& table, int32_t next_pos);
  // Group 0: drops the references to the blocks that hold only positions before
  // first_needed_pos; never the last block.
  void free_blocks_before(BlockTable& table, int32_t first_needed_pos);

  // Token eviction (kv_eviction.h, docs/kv-eviction.md): takes the row entries `entries`
  // (ascending, distinct, full blocks: never the newest entry) out of the table's one row and
  // closes the gap; the table then holds entries.size() x block_size fewer slots and as many more
  // evicted positions. The table's reference to each goes (a block shared with another table
  // stays with it; a cached one stays in the prefix cache, its content the original prefix's), and
  // nothing of the table is registered in the prefix cache from then on: a block computed after
  // an eviction attended to fewer tokens than the same prefix's block would, and the row's entry
  // i no longer holds the prompt's block i. Only for a cache of one full-attention group (the
  // engine refuses eviction otherwise). Cost: O(row).
  void evict_blocks(BlockTable& table, std::span<const int32_t> entries);
  // Token-level eviction's compaction (kv_eviction.h, docs/kv-eviction.md): takes the table's
  // slots `slots` (ascending, distinct, < num_tokens) out of its one row and fills each hole
  // below the new length K = num_tokens - slots.size() with the newest live slot above K, in
  // order (hole i gets the i-th live slot at or past K), so that the row holds slots [0, K) in
  // ceil(K / B) blocks; the entries past them go back (one reference each). Returns the token
  // copies that make it so (pool 0, src slot -> dst slot; no copy writes another's source),
  // which the caller runs before the pool allocates again: sources may lie in the blocks given
  // back here. Every block with a removed slot
  // below K is written: it must be the table's alone and not in the prefix cache (the engine
  // never evicts a token of a block shared with a fork, and a token-evicting sequence never
  // enters the prefix cache). The table's hash chain ends, as in evict_blocks. Cost:
  // O(row + slots).
  std::vector<SlotCopy> compact_tokens(BlockTable& table, std::span<const int32_t> slots);
  // The same per (layer, KV head) (SnapKV per head): head_slots[i] are the slots head i (layer *
  // num_kv_heads + kv_head) gives up, each ascending, distinct, < num_tokens, and of one common
  // count, so every head keeps the same K slots and the row stays one row of ceil(K / B) blocks;
  // each head's holes below K take its own live slots at or past K (compaction_moves), so a
  // slot i < K holds a different position in different heads. The copies carry their head. The
  // same conditions on the blocks written as compact_tokens (any head's hole); the hash chain
  // ends before the earliest block any head changes. Cost: O(row + heads x slots).
  std::vector<SlotCopy> compact_head_tokens(BlockTable& table,
                                            std::span<const std::vector<int32_t>> head_slots);
  // The same two, asynchronous (a copy thread runs the copies while the step thread goes on):
  // the table's row is switched now, exactly as above, but its references to the blocks it gave
  // up move to the plan, so the pool hands none of them out until release_compacted(plan),
  // which the caller calls once the copies are done. Until then no step may read or write the
  // table's blocks (the engine waits for the copies before its next step).
  CompactionPlan plan_compaction(BlockTable& table, std::span<const int32_t> slots);
  CompactionPlan plan_head_compaction(BlockTable& table,
                                      std::span<const std::vector<int32_t>> head_slots);
  // Drops the plan's references (one each: a block shared with another table stays with it) and
  // empties it.
  void release_compacted(CompactionPlan& plan);

  // Swap-out: group g's row over the first num_computed positions with kNullBlock where no query
  // from position num_computed on reads it -- the entries to keep; its non-null ones are the
  // blocks to copy out, in order.
  std::vector<BlockId> blocks_to_swap(const BlockTable& table, int32_t g,
                                      int32_t num_computed) const;
  // Swap-in: the empty table takes rows -- one per group, blocks allocated from that group's pool
  // by the caller (one reference each) and holding the positions' K/V again, kNullBlock where
  // blocks_to_swap left one -- for num_tokens positions. Its blocks are not registered in the
  // prefix cache again. num_evicted_tokens: the table's evicted positions before the swap-out
  // (num_tokens counts slots, not positions).
  void adopt_blocks(BlockTable& table, std::vector<std::vector<BlockId>> rows, int32_t num_tokens,
                    int32_t num_evicted_tokens = 0);

  // Drops the table's references, last block first in each group: a sequence's tail is evicted
  // before the prefix other requests are likelier to share. Empties the table.
  void free(BlockTable& table);

  // Group g's copies queued by copy-on-write since the last call, in order; the caller runs them
  // (e.g. copy_blocks() in block_copy.h) on that group's buffer before the next forward pass.
  std::vector<BlockCopy> take_pending_copies(int32_t g = 0);

  // Aborts on a broken invariant of any pool or of the tables' rows (each table must be one this
  // manager manages; pass every live one to also check reference counts, and every compaction
  // plan not yet released, whose blocks hold a reference each). O(blocks).
  void check_invariants(std::span<const BlockTable* const> tables = {},
                        std::span<const CompactionPlan* const> in_flight = {}) const;

  PrefixCacheStats stats() const;

 private:
  // compact_tokens (one row of slots, copies for every head) and compact_head_tokens (a row
  // per head, each copy carrying its head) share this.
  CompactionPlan compact_rows(BlockTable& table,
                              std::span<const std::span<const int32_t>> head_slots, bool per_head);
  KvGroupManager& group(int32_t g) { return groups_.at(static_cast<size_t>(g)); }
  const KvGroupManager& group(int32_t g) const { return groups_.at(static_cast<size_t>(g)); }
  // Gives the table a row per group (tables start with one).
  void add_rows(BlockTable& table) const;
  // Token eviction changed the table's row from this entry on: its hash chain ends before it,
  // and nothing of the table is registered in the prefix cache again.
  static void end_hash_chain(BlockTable& table, int32_t first_changed_block);
  std::vector<KvGroupManager::Plan> plan(const BlockTable& table, int32_t num_new_tokens,
                                         const PrefixHit* hit) const;
  // Whether every group's plan fits with watermark_blocks(g, watermark) left free.
  bool fits(const std::vector<KvGroupManager::Plan>& plans, double watermark) const;
  // Cuts hit to the longest prefix for which every later group has its needed copies, and
  // fills their rows.
  void trim_to_group_copies(PrefixHit& hit) const;

  int32_t block_size_;
  std::vector<KvGroupManager> groups_;
  BlockHasher hasher_;
  PrefixCacheStats stats_;
};

}  // namespace strata::kv

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
// INT4 (KIVI) caches (KvCacheConfig::residual_num_blocks > 0; docs/kv.md, "The residual pool"):
// a second BlockPool, without prefix caching, holds each sequence's newest blocks at full
// precision. Before a step computes a table's tokens from position s, its residual entries are
// cut to the logical blocks a query at s or later still reads at full precision --
// max(0, s / block_size - R + 1) on, R = residual_blocks -- and every new block gets a residual
// block too; allocation accounts for both pools, all or nothing. fork() shares the parent's
// residual blocks and the first write into a shared, partly filled one copies it (queued apart
// from the main pool's copies: take_pending_residual_copies()). With prefix caching, each
// registered block's residual copy is kept too (cached in the residual pool, LRU-evicted on
// reuse) and linked to the cached int4 block, so that a hit with R > 1 can give the first
// computed position the full-precision blocks the cold run read (find_cached_prefix).
//
// Owns the BlockPool, a BlockHasher and the prefix-cache counters; borrows the block tables (the
// sequences own them) and the event sink. Invariants: every table it manages holds one reference
// per block entry; a table's leading num_cached_blocks() blocks are cached in the pool (or were
// when registered: eviction only happens once every reference is gone). Not thread-safe: the
// scheduler thread owns it. Cost: O(blocks touched) per call, plus one SHA-256 per full block
// hashed (each block of a sequence is hashed once).

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_events.h"
#include "kv/kv_layout.h"

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
  // INT4 caches: blocks of the full-precision residual pool, the null block included (0 = no
  // residual pool; kv::residual_pool_blocks() sizes it), and R >= 1, the blocks a query reads
  // at full precision (its own and the R - 1 before it: --kv-int4-residual N = R x block_size).
  int32_t residual_num_blocks = 0;
  int32_t residual_blocks = 0;
};

// Residual-pool blocks (the null block included) that scheduler limits can never exhaust: each
// sequence holds at most R blocks between steps and R + 1 plus its chunk's blocks during one,
// and a step's chunks hold at most ceil(max_num_batched_tokens / block_size) + 1 blocks more
// than their tokens fill: max_num_seqs x (R + 1) + ceil(max_num_batched_tokens / block_size) + 1.
int32_t residual_pool_blocks(int32_t max_num_seqs, int32_t residual_blocks,
                             int32_t max_num_batched_tokens, int32_t block_size);
// True when some layer of the spec holds INT4 (KIVI) codes: the pool then needs a residual pool.
bool needs_residual_pool(const KvSpec& spec);
// The residual pool's shape: the spec's layers, KV heads and head_dim, `dtype` in every layer --
// the backend's full precision: F32 on the CPU, BF16 on the GPU (its activations' precision).
// Uniform even when the main pool has per-layer exceptions, whose layers simply never touch it.
KvSpec residual_spec(const KvSpec& spec, DType dtype = DType::kF32);

// A request's cached prefix: blocks[i] holds tokens [i * block_size, (i + 1) * block_size).
struct PrefixHit {
  std::vector<BlockId> blocks;
  std::vector<BlockHash> hashes;  // hashes[i] is blocks[i]'s hash
  int32_t num_tokens = 0;         // blocks.size() * block_size
  // INT4 with R > 1: the residual pool's cached copies of the hit's last residual_blocks.size()
  // blocks (max(0, blocks.size() - R + 1) on), which the first computed position reads at full
  // precision. Empty otherwise.
  std::vector<BlockId> residual_blocks;
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
  // The residual pool (INT4 caches); has_residual() says whether there is one.
  bool has_residual() const { return residual_pool_.num_blocks() > 1; }
  BlockPool& residual_pool() { return residual_pool_; }
  const BlockPool& residual_pool() const { return residual_pool_; }
  int32_t residual_blocks() const { return residual_blocks_; }
  int32_t block_size() const { return pool_.block_size(); }
  bool prefix_caching() const { return pool_.prefix_caching(); }

  // The longest cached prefix of tokens, in whole blocks, leaving at least the last token to
  // compute (a step needs it to produce logits). Nothing is referenced yet; the only side effect
  // is the query counters. Empty when prefix caching is off. With a sliding window, the whole
  // chain is still confirmed, but the entries wholly before the window of the first position to
  // compute are kNullBlock: the table will not take them. With a residual pool and R > 1 the
  // first position computed after a hit of h blocks reads blocks h - R + 1 .. h - 1 at full
  // precision, so the hit is cut to the longest h whose those blocks' residual copies are cached
  // as well (hit.residual_blocks); a residual copy evicted since leaves a shorter hit, or none.
  // (R = 1 reads none of the hit at full precision.)
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens, const BlockExtraKeys& extra);

  // Blocks allocate_slots(table, num_new_tokens, hit) would take from the free queue, the hit's
  // currently free blocks included. Side-effect free.
  int32_t num_blocks_to_allocate(const BlockTable& table, int32_t num_new_tokens,
                                 const PrefixHit* hit = nullptr) const;
  bool can_allocate(const BlockTable& table, int32_t num_new_tokens,
                    const PrefixHit* hit = nullptr) const {
    return num_blocks_to_allocate(table, num_new_tokens, hit) <= pool_.num_free_blocks() &&
           residual_fits(table, num_new_tokens, hit);
  }
  // Residual-pool blocks allocate_slots would take from its free queue (0 without a residual
  // pool), and whether they are there once the table's entries before its new window are given
  // back. Side-effect free.
  int32_t num_residual_blocks_to_allocate(const BlockTable& table, int32_t num_new_tokens,
                                          const PrefixHit* hit = nullptr) const;
  bool residual_fits(const BlockTable& table, int32_t num_new_tokens,
                     const PrefixHit* hit = nullptr) const;

  // Gives the table slots for num_new_tokens more tokens. With a hit, the table must be empty: it
  // first takes the hit's blocks (a reference each), so it ends with hit->num_tokens +
  // num_new_tokens slots. If the table's last block is partly filled and shared, it is replaced
  // by a fresh copy (queued in pending copies) before new tokens land in it. Returns false, and
  // changes neither the pool nor the table, when too few blocks are free. A hit is valid until
  // the pool next changes: look it up and allocate in the same scheduling decision.
  // With a residual pool, the table's residual entries then cover logical blocks
  // max(0, s / block_size - R + 1) (s = its first new position) through its new last block: the
  // ones before are given back, new blocks get residual blocks, and a shared, partly filled
  // last residual block is replaced by a copy (pending residual copies) -- all or nothing
  // together with the main pool.
  [[nodiscard]] bool allocate_slots(BlockTable& table, int32_t num_new_tokens,
                                    const PrefixHit* hit = nullptr);

  // Registers the table's full blocks among its first num_computed tokens (whose K/V the step has
  // written) in the prefix cache. tokens: the sequence's ids, at least num_computed of them.
  void cache_full_blocks(BlockTable& table, std::span<const int32_t> tokens, int32_t num_computed,
                         const BlockExtraKeys& extra);

  // child (empty) shares every block of parent: one more reference each, same token count and
  // hashes. The first append into a shared partly filled block copies it (allocate_slots). The
  // residual entries are shared the same way (full residual blocks are never written again).
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

  // Residual pool: gives back the table's residual entries no query from position
  // first_needed_pos on reads at full precision (logical blocks below
  // max(0, first_needed_pos / block_size - R + 1)); the engine calls it after each step with the
  // next position, so a sequence holds at most R residual blocks between steps. Their int4
  // blocks are complete (a block's last append quantized it). No-op without a residual pool.
  void free_residual_before(BlockTable& table, int32_t first_needed_pos);

  // Swap-in: the empty table takes blocks -- allocated from this pool (one reference each) and
  // holding the positions' K/V again, kNullBlock for entries a sliding window had skipped -- for
  // num_tokens positions. Its blocks are not registered in the prefix cache again.
  void adopt_blocks(BlockTable& table, std::vector<BlockId> blocks, int32_t num_tokens);
  // Swap-in of an INT4 table (after adopt_blocks): its residual entries, residual-pool blocks
  // allocated by the caller (one reference each) holding logical blocks first_block, ... through
  // the table's last block again.
  void adopt_residual_blocks(BlockTable& table, int32_t first_block, std::vector<BlockId> blocks);

  // Drops the table's references, last block first: a sequence's tail is evicted before the
  // prefix other requests are likelier to share. Empties the table, residual entries included.
  void free(BlockTable& table);

  // The copies queued by copy-on-write since the last call, in order; the caller runs them (e.g.
  // copy_blocks() in block_copy.h) before the next forward pass.
  std::vector<BlockCopy> take_pending_copies();
  // The same for the residual pool (copy-on-write of a forked sequence's partly filled residual
  // block): block ids of the residual pool, run on its buffer before the next forward pass.
  std::vector<BlockCopy> take_pending_residual_copies();

  // Aborts on a broken invariant of either pool or of the tables' residual entries (each table
  // must be one this manager manages; pass every live one to also check reference counts).
  // O(blocks).
  void check_invariants(std::span<const BlockTable* const> tables = {}) const;

  PrefixCacheStats stats() const;

 private:
  bool needs_copy_on_write(const BlockTable& table, int32_t num_new_tokens) const;
  // What allocate_slots(table, num_new_tokens, hit) does to the residual pool (its first new
  // position is the hit's end, or the table's token count).
  struct ResidualPlan {
    int32_t first_block = 0;    // max(0, first_pos / block_size - R + 1)
    int32_t num_freed = 0;      // leading entries given back
    int32_t num_reclaimed = 0;  // of which return to the free queue (not shared)
    int32_t num_new = 0;        // residual blocks allocated for new logical blocks
    int32_t num_hit_free = 0;   // a hit's cached residual copies that leave the free queue
    bool copy_last = false;     // the shared, partly filled last residual block is copied
  };
  ResidualPlan plan_residual(const BlockTable& table, int32_t num_new_tokens,
                             const PrefixHit* hit) const;
  void allocate_residual(BlockTable& table, const ResidualPlan& plan, const PrefixHit* hit);
  // Links the table's residual entry for its full logical block i to `main`, the cached
  // main-pool block holding the same positions, and caches it in the residual pool (so it
  // outlives the table until evicted). No-op without a residual entry there or when `main`
  // already has a live copy.
  void cache_residual_copy(const BlockTable& table, int32_t i, BlockId main, const BlockHash& hash,
                           std::span<const int32_t> tokens, const BlockExtraKeys& extra);
  // The live residual copy of cached main-pool block `main`, if any: neither block has been
  // cached again since they were linked, so the copy holds main's positions at full precision.
  std::optional<BlockId> residual_copy(BlockId main) const;
  // Cuts a hit to the longest prefix whose last R - 1 blocks have cached residual copies, and
  // fills hit.residual_blocks with them (R > 1).
  void trim_to_residual_copies(PrefixHit& hit) const;

  BlockPool pool_;
  BlockPool residual_pool_;
  int32_t residual_blocks_ = 0;
  BlockHasher hasher_;
  int32_t window_ = 0;
  std::vector<BlockCopy> pending_copies_;
  std::vector<BlockCopy> pending_residual_copies_;
  // INT4 with prefix caching: main-pool block id -> its residual copy and both blocks' cache
  // generations when linked (checked by residual_copy(); stale links are overwritten).
  struct ResidualLink {
    BlockId residual;
    uint32_t residual_gen = 0;
    uint32_t main_gen = 0;
  };
  std::unordered_map<int32_t, ResidualLink> residual_links_;
  PrefixCacheStats stats_;
};

}  // namespace strata::kv

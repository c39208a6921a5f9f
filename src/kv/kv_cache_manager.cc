#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "core/check.h"
#include "kv/kv_eviction.h"

namespace strata::kv {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : block_size_(config.block_size), hasher_(config.hash_bits) {
  STRATA_CHECK(!config.groups.empty(), "a KV cache needs at least one group");
  STRATA_CHECK(config.groups[0].spec.kind != KvGroupKind::kNewestBlocks,
               "group 0 holds every block a query reads: full attention or a sliding window");
  groups_.reserve(config.groups.size());
  for (size_t g = 0; g < config.groups.size(); ++g) {
    const KvGroupConfig& c = config.groups[g];
    STRATA_CHECK(c.num_blocks >= (g == 0 ? 1 : 2), "a group after the first needs a block");
    // Later groups cache their copies without events: their pools are the runner's, not a tier
    // others see.
    groups_.emplace_back(
        c.spec, BlockPoolConfig{c.num_blocks, config.block_size, config.enable_prefix_caching,
                                g == 0 ? config.event_sink : nullptr});
  }
}

void KvCacheManager::add_rows(BlockTable& table) const {
  if (table.num_groups() < num_groups()) table.rows_.resize(static_cast<size_t>(num_groups()));
}

PrefixHit KvCacheManager::cached_chain(std::span<const int32_t> tokens,
                                       const BlockExtraKeys& extra) {
  PrefixHit hit;
  hit.rows.resize(static_cast<size_t>(num_groups()));
  if (!prefix_caching()) return hit;
  const int32_t bs = block_size();
  const auto max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  std::vector<BlockId>& blocks = hit.rows[0];
  BlockId parent = kNullBlock;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const std::span<const int32_t> block_tokens =
        tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs));
    const BlockHash hash =
        hasher_.hash(hit.hashes.empty() ? nullptr : &hit.hashes.back(), block_tokens, extra);
    const std::optional<BlockId> block = pool().find_cached(hash, parent, block_tokens, extra);
    if (!block) break;
    blocks.push_back(*block);
    hit.hashes.push_back(hash);
    parent = *block;
  }
  hit.num_tokens = static_cast<int32_t>(blocks.size()) * bs;
  return hit;
}

PrefixHit KvCacheManager::hit_of(PrefixHit hit) const {
  const int32_t bs = block_size();
  hit.rows.resize(static_cast<size_t>(num_groups()));
  std::vector<BlockId>& blocks = hit.rows[0];
  if (num_groups() > 1) trim_to_group_copies(hit);
  hit.num_tokens = static_cast<int32_t>(blocks.size()) * bs;
  // Group 0 keeps only what the first computed position reads (a window's last blocks).
  const int32_t first = std::min(group_spec(0).first_needed_block(hit.num_tokens, bs),
                                 static_cast<int32_t>(blocks.size()));
  std::fill_n(blocks.begin(), first, kNullBlock);
  return hit;
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens,
                                             const BlockExtraKeys& extra) {
  if (!prefix_caching()) return cached_chain(tokens, extra);
  PrefixHit hit = hit_of(cached_chain(tokens, extra));
  ++stats_.num_queries;
  stats_.num_query_tokens += static_cast<int64_t>(tokens.size());
  stats_.num_hit_tokens += hit.num_tokens;
  return hit;
}

std::optional<BlockId> KvCacheManager::group_copy(int32_t g, BlockId primary) const {
  return group(g).copy_of(primary, pool().cache_gen(primary));
}

bool KvCacheManager::cache_group_copy(int32_t g, BlockId copy, BlockId primary,
                                      const BlockHash& hash, std::span<const int32_t> tokens,
                                      const BlockExtraKeys& extra) {
  STRATA_CHECK(g > 0 && pool().is_cached(primary), "a copy of a cached block of group 0");
  return group(g).link_copy(copy, primary, pool().cache_gen(primary), hash, tokens, extra);
}

void KvCacheManager::trim_to_group_copies(PrefixHit& hit) const {
  const int32_t bs = block_size();
  std::vector<BlockId>& blocks = hit.rows[0];
  const BlockPool& primary = pool();
  auto copy_of = [&](int32_t g, int32_t j) {
    const BlockId b = blocks[static_cast<size_t>(j)];
    return group(g).copy_of(b, primary.cache_gen(b));
  };
  // A missing copy of block j rules out every h whose needed range holds j: try h = j next, and
  // check every group again until all of them have their copies.
  auto h = static_cast<int32_t>(blocks.size());
  for (bool changed = true; changed && h > 0;) {
    changed = false;
    for (int32_t g = 1; g < num_groups() && h > 0; ++g) {
      const int32_t from = group_spec(g).first_needed_block(h * bs, bs);
      int32_t j = h - 1;
      while (j >= from && copy_of(g, j).has_value()) --j;
      if (j >= from) {
        h = j;
        changed = true;
      }
    }
  }
  blocks.resize(static_cast<size_t>(h));
  hit.hashes.resize(static_cast<size_t>(h));
  for (int32_t g = 1; g < num_groups(); ++g) {
    std::vector<BlockId>& row = hit.rows[static_cast<size_t>(g)];
    row.assign(static_cast<size_t>(h), kNullBlock);
    for (int32_t j = group_spec(g).first_needed_block(h * bs, bs); j < h; ++j) {
      row[static_cast<size_t>(j)] = *copy_of(g, j);
    }
  }
}

std::vector<KvGroupManager::Plan> KvCacheManager::plan(const BlockTable& table,
                                                       int32_t num_new_tokens,
                                                       const PrefixHit* hit) const {
  STRATA_CHECK(num_new_tokens >= 0, "allocate: negative token count");
  const bool with_hit = hit != nullptr && !hit->empty();
  STRATA_CHECK(!with_hit || table.num_tokens() == 0, "a prefix hit goes into an empty block table");
  STRATA_CHECK(!with_hit || static_cast<int32_t>(hit->rows.size()) == num_groups(),
               "a prefix hit of another cache");
  const int32_t first_pos = with_hit ? hit->num_tokens : table.num_tokens();
  std::vector<KvGroupManager::Plan> plans;
  plans.reserve(groups_.size());
  for (int32_t g = 0; g < num_groups(); ++g) {
    const std::span<const BlockId> hit_row =
        with_hit ? std::span<const BlockId>(hit->rows[static_cast<size_t>(g)])
                 : std::span<const BlockId>();
    plans.push_back(group(g).plan(table, g, hit_row, first_pos, num_new_tokens));
  }
  return plans;
}

int32_t KvCacheManager::num_blocks_to_allocate(const BlockTable& table, int32_t num_new_tokens,
                                               const PrefixHit* hit, int32_t g) const {
  return plan(table, num_new_tokens, hit)[static_cast<size_t>(g)].num_blocks();
}

int32_t KvCacheManager::watermark_blocks(int32_t g, double watermark) const {
  if (!group_spec(g).sized_by_memory()) return 0;
  return static_cast<int32_t>(std::ceil(watermark * (pool(g).num_blocks() - 1)));
}

bool KvCacheManager::fits(const std::vector<KvGroupManager::Plan>& plans, double watermark) const {
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (!group(g).fits(plans[static_cast<size_t>(g)], watermark_blocks(g, watermark))) {
      return false;
    }
  }
  return true;
}

bool KvCacheManager::can_allocate(const BlockTable& table, int32_t num_new_tokens,
                                  const PrefixHit* hit, double watermark) const {
  return fits(plan(table, num_new_tokens, hit), watermark);
}

bool KvCacheManager::allocate_slots(BlockTable& table, int32_t num_new_tokens,
                                    const PrefixHit* hit) {
  const std::vector<KvGroupManager::Plan> plans = plan(table, num_new_tokens, hit);
  if (!fits(plans, 0.0)) return false;
  // From here on nothing can fail: the plans counted every block taken below.
  const bool with_hit = hit != nullptr && !hit->empty();
  add_rows(table);
  if (with_hit) {
    table.num_tokens_ = hit->num_tokens;
    table.block_hashes_ = hit->hashes;
    table.num_cached_blocks_ = static_cast<int32_t>(hit->hashes.size());
    table.chain_tail_ = hit->rows[0].back();
  }
  const int32_t bs = block_size();
  const int32_t num_blocks_after = (table.num_tokens_ + num_new_tokens + bs - 1) / bs;
  for (int32_t g = 0; g < num_groups(); ++g) {
    const std::span<const BlockId> hit_row =
        with_hit ? std::span<const BlockId>(hit->rows[static_cast<size_t>(g)])
                 : std::span<const BlockId>();
    group(g).allocate(table, g, plans[static_cast<size_t>(g)], hit_row, num_blocks_after);
  }
  table.num_tokens_ += num_new_tokens;
  return true;
}

void KvCacheManager::cache_full_blocks(BlockTable& table, std::span<const int32_t> tokens,
                                       int32_t num_computed, const BlockExtraKeys& extra) {
  // After an eviction nothing more is the prompt's prefix (evict_blocks).
  if (!prefix_caching() || table.num_evicted_tokens() > 0) return;
  STRATA_CHECK(num_computed >= 0 && num_computed <= table.num_tokens() &&
                   static_cast<size_t>(num_computed) <= tokens.size(),
               "cache_full_blocks: more computed tokens than slots or token ids");
  const int32_t bs = block_size();
  const int32_t num_full = num_computed / bs;
  BlockPool& primary = pool();
  for (auto i = static_cast<int32_t>(table.block_hashes_.size()); i < num_full; ++i) {
    const BlockHash* parent = i == 0 ? nullptr : &table.block_hashes_[static_cast<size_t>(i) - 1];
    table.block_hashes_.push_back(hasher_.hash(
        parent,
        tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs)),
        extra));
  }
  for (int32_t i = table.num_cached_blocks_; i < num_full; ++i) {
    table.num_cached_blocks_ = i + 1;
    if (!table.chain_tail_.valid()) continue;  // the chain broke: nothing below is reachable
    const auto idx = static_cast<size_t>(i);
    const std::span<const int32_t> block_tokens =
        tokens.subspan(idx * static_cast<size_t>(bs), static_cast<size_t>(bs));
    const BlockHash& hash = table.block_hashes_[idx];
    const BlockId parent = table.chain_tail_;
    const BlockId block = table.rows_[0].blocks[idx];
    if (block == kNullBlock) {  // given back before it was registered: nothing more to register
      table.chain_tail_ = BlockId{};
      continue;
    }
    // An identical block may be cached already (the same prompt computed twice, or a forked table
    // sharing its parent's block): it becomes the chain's parent for what follows.
    if (const std::optional<BlockId> same =
            primary.find_cached(hash, parent, block_tokens, extra)) {
      table.chain_tail_ = *same;
    } else if (!primary.is_cached(block) &&
               primary.cache_block(block, hash, i == 0 ? nullptr : &table.block_hashes_[idx - 1],
                                   parent, block_tokens, extra)) {
      table.chain_tail_ = block;
    } else {
      table.chain_tail_ = BlockId{};  // the parent was evicted since: stop registering
    }
    // Later groups: their copy of the block, linked to the cached block now holding these
    // positions.
    if (!table.chain_tail_.valid()) continue;
    for (int32_t g = 1; g < num_groups(); ++g) {
      group(g).cache_copy(table, g, i, table.chain_tail_, primary.cache_gen(table.chain_tail_),
                          hash, block_tokens, extra);
    }
  }
}

void KvCacheManager::fork(const BlockTable& parent, BlockTable& child) {
  STRATA_CHECK(child.num_tokens() == 0 && child.rows_[0].blocks.empty(),
               "fork into a non-empty table");
  STRATA_CHECK(child.block_size() == parent.block_size(), "fork across block sizes");
  add_rows(child);
  for (int32_t g = 0; g < parent.num_groups(); ++g) group(g).fork(parent, child, g);
  child.block_hashes_ = parent.block_hashes_;
  child.num_tokens_ = parent.num_tokens_;
  child.num_evicted_tokens_ = parent.num_evicted_tokens_;
  child.num_cached_blocks_ = parent.num_cached_blocks_;
  child.chain_tail_ = parent.chain_tail_;
}

void KvCacheManager::free_unneeded_blocks(BlockTable& table, int32_t next_pos) {
  for (int32_t g = 0; g < table.num_groups(); ++g) {
    group(g).free_before(table, g, group_spec(g).first_needed_block(next_pos, block_size()));
  }
}

void KvCacheManager::free_blocks_before(BlockTable& table, int32_t first_needed_pos) {
  // Never the last block: it holds the newest position, which every next query reads.
  const int32_t last_block = static_cast<int32_t>(table.blocks().size()) - 1;
  group(0).free_before(table, 0,
                       std::min(std::max(first_needed_pos, 0) / block_size(), last_block));
}

std::vector<BlockId> KvCacheManager::blocks_to_swap(const BlockTable& table, int32_t g,
                                                    int32_t num_computed) const {
  const int32_t bs = block_size();
  const auto keep = static_cast<size_t>((num_computed + bs - 1) / bs);
  const std::span<const BlockId> row = table.blocks(g);
  STRATA_CHECK(row.size() >= keep, "blocks_to_swap: more computed positions than blocks");
  std::vector<BlockId> kept(row.begin(), row.begin() + static_cast<ptrdiff_t>(keep));
  const auto first =
      std::min(static_cast<size_t>(group_spec(g).first_needed_block(num_computed, bs)), keep);
  std::fill_n(kept.begin(), first, kNullBlock);
  for (size_t i = first; i < keep; ++i) {
    STRATA_CHECK(kept[i] != kNullBlock, "a computed block a later query reads was given back");
  }
  return kept;
}

void KvCacheManager::adopt_blocks(BlockTable& table, std::vector<std::vector<BlockId>> rows,
                                  int32_t num_tokens, int32_t num_evicted_tokens) {
  STRATA_CHECK(table.num_tokens() == 0 && table.rows_[0].blocks.empty(),
               "adopt_blocks: table not empty");
  STRATA_CHECK(static_cast<int32_t>(rows.size()) == num_groups(), "adopt_blocks: a row per group");
  const int32_t num_blocks = table.num_blocks_needed(num_tokens);
  add_rows(table);
  for (size_t g = 0; g < rows.size(); ++g) {
    STRATA_CHECK(num_blocks == static_cast<int32_t>(rows[g].size()),
                 "adopt_blocks: block count does not match the token count");
    BlockTable::Row& row = table.rows_[g];
    row.num_skipped = num_leading_nulls(rows[g]);
    row.blocks = std::move(rows[g]);
  }
  table.num_tokens_ = num_tokens;
  table.num_evicted_tokens_ = num_evicted_tokens;
  table.chain_tail_ = BlockId{};  // nothing further is registered
}

void KvCacheManager::end_hash_chain(BlockTable& table, int32_t first_changed_block) {
  const auto first = static_cast<size_t>(first_changed_block);
  if (table.block_hashes_.size() > first) table.block_hashes_.resize(first);
  table.num_cached_blocks_ = std::min(table.num_cached_blocks_, first_changed_block);
  table.chain_tail_ = BlockId{};
}

void KvCacheManager::evict_blocks(BlockTable& table, std::span<const int32_t> entries) {
  if (entries.empty()) return;
  STRATA_CHECK(num_groups() == 1 && group_spec(0).kind == KvGroupKind::kFullAttention,
               "token eviction needs a cache of one full-attention group");
  BlockTable::Row& row = table.rows_[0];
  const auto num_blocks = static_cast<int32_t>(row.blocks.size());
  STRATA_CHECK(table.num_tokens_ <= num_blocks * block_size(), "a row shorter than its slots");
  for (size_t k = 0; k < entries.size(); ++k) {
    STRATA_CHECK(entries[k] >= 0 && entries[k] < num_blocks - 1 &&
                     (k == 0 || entries[k] > entries[k - 1]) &&
                     row.blocks[static_cast<size_t>(entries[k])] != kNullBlock,
                 "evict_blocks: entries must be ascending held full blocks, never the newest");
  }
  std::vector<BlockId> gone;
  gone.reserve(entries.size());
  std::vector<BlockId> kept;
  kept.reserve(row.blocks.size() - entries.size());
  size_t next = 0;
  for (int32_t i = 0; i < num_blocks; ++i) {
    const BlockId b = row.blocks[static_cast<size_t>(i)];
    if (next < entries.size() && entries[next] == i) {
      gone.push_back(b);
      ++next;
    } else {
      kept.push_back(b);
    }
  }
  pool().free(gone);  // one reference each: a block another table shares stays in use
  row.blocks = std::move(kept);
  const auto num_gone = static_cast<int32_t>(entries.size()) * block_size();
  table.num_tokens_ -= num_gone;
  table.num_evicted_tokens_ += num_gone;
  // The chain ends before the first gap, and nothing more is registered (cache_full_blocks).
  end_hash_chain(table, entries.front());
}

std::vector<SlotCopy> KvCacheManager::compact_tokens(BlockTable& table,
                                                     std::span<const int32_t> slots) {
  CompactionPlan plan = plan_compaction(table, slots);
  release_compacted(plan);  // the caller copies before the pool allocates again
  return std::move(plan.copies);
}

std::vector<SlotCopy> KvCacheManager::compact_head_tokens(
    BlockTable& table, std::span<const std::vector<int32_t>> head_slots) {
  CompactionPlan plan = plan_head_compaction(table, head_slots);
  release_compacted(plan);
  return std::move(plan.copies);
}

CompactionPlan KvCacheManager::plan_compaction(BlockTable& table, std::span<const int32_t> slots) {
  return compact_rows(table, std::span<const std::span<const int32_t>>(&slots, 1),
                      /*per_head=*/false);
}

CompactionPlan KvCacheManager::plan_head_compaction(
    BlockTable& table, std::span<const std::vector<int32_t>> head_slots) {
  const std::vector<std::span<const int32_t>> spans(head_slots.begin(), head_slots.end());
  return compact_rows(table, spans, /*per_head=*/true);
}

void KvCacheManager::release_compacted(CompactionPlan& plan) {
  pool().free(plan.released);  // one reference each: a block another table shares stays in use
  plan.released.clear();
}

CompactionPlan KvCacheManager::compact_rows(BlockTable& table,
                                            std::span<const std::span<const int32_t>> head_slots,
                                            bool per_head) {
  if (head_slots.empty() || head_slots.front().empty()) {
    for (const std::span<const int32_t> h : head_slots) {
      STRATA_CHECK(h.empty(), "token compaction: every head gives up as many slots");
    }
    return {};
  }
  STRATA_CHECK(num_groups() == 1 && group_spec(0).kind == KvGroupKind::kFullAttention,
               "token eviction needs a cache of one full-attention group");
  BlockTable::Row& row = table.rows_[0];
  const int32_t bs = block_size();
  const BlockPool& p = pool();
  const auto block_of = [&](int32_t slot) { return row.blocks[static_cast<size_t>(slot / bs)]; };
  const auto physical = [&](int32_t slot) {
    return static_cast<int64_t>(block_of(slot).value) * bs + slot % bs;
  };
  const size_t count = head_slots.front().size();
  CompactionPlan plan;
  std::vector<SlotCopy>& copies = plan.copies;
  int32_t first_changed = table.num_tokens_;
  for (size_t h = 0; h < head_slots.size(); ++h) {
    const std::span<const int32_t> slots = head_slots[h];
    STRATA_CHECK(slots.size() == count, "token compaction: every head gives up as many slots");
    first_changed = std::min(first_changed, slots.front());
    for (const auto& [from, to] : compaction_moves(table.num_tokens_, slots)) {
      const BlockId dst = block_of(to);
      STRATA_CHECK(p.ref_count(dst) == 1 && !p.is_cached(dst),
                   "token compaction: a hole below the new length is in a shared or cached block");
      copies.push_back(
          SlotCopy{physical(from), physical(to), per_head ? static_cast<int32_t>(h) : -1});
    }
  }
  const int32_t kept = table.num_tokens_ - static_cast<int32_t>(count);
  const int32_t num_blocks = (kept + bs - 1) / bs;
  // The table's references to the blocks past the kept ones move to the plan.
  plan.released.assign(row.blocks.begin() + num_blocks, row.blocks.end());
  row.blocks.resize(static_cast<size_t>(num_blocks));
  table.num_tokens_ = kept;
  table.num_evicted_tokens_ += static_cast<int32_t>(count);
  // The chain ends before the earliest block any head changed (nothing is registered after).
  end_hash_chain(table, first_changed / bs);
  return plan;
}

void KvCacheManager::free(BlockTable& table) {
  for (int32_t g = 0; g < table.num_groups(); ++g) group(g).free(table, g);
  table.clear();
}

std::vector<BlockCopy> KvCacheManager::take_pending_copies(int32_t g) {
  return group(g).take_pending_copies();
}

void KvCacheManager::check_invariants(std::span<const BlockTable* const> tables,
                                      std::span<const CompactionPlan* const> in_flight) const {
  std::vector<std::vector<int32_t>> refs;
  for (const KvGroupManager& m : groups_) {
    m.pool().check_invariants();
    refs.emplace_back(static_cast<size_t>(m.pool().num_blocks()), 0);
  }
  for (const BlockTable* t : tables) {
    STRATA_CHECK(t->num_groups() == 1 || t->num_groups() == num_groups(),
                 "a table with rows for another cache's groups");
    for (int32_t g = 0; g < t->num_groups(); ++g) {
      const BlockTable::Row& row = t->rows_[static_cast<size_t>(g)];
      STRATA_CHECK(g == 0 || row.blocks.size() == t->rows_[0].blocks.size() ||
                       (row.blocks.empty() && t->num_tokens() == 0),
                   "a group's row must cover the table's blocks");
      STRATA_CHECK(row.num_skipped == num_leading_nulls(row.blocks) ||
                       row.num_skipped == static_cast<int32_t>(row.blocks.size()),
                   "a row's given-back entries must be exactly its leading null entries");
      for (size_t i = 0; i < row.blocks.size(); ++i) {
        const BlockId b = row.blocks[i];
        STRATA_CHECK(b.value >= 0 && b.value < pool(g).num_blocks(),
                     "table block outside the pool");
        STRATA_CHECK(b != kNullBlock || static_cast<int32_t>(i) < row.num_skipped,
                     "a null entry after a row's held blocks");
        if (b != kNullBlock) ++refs[static_cast<size_t>(g)][static_cast<size_t>(b.value)];
      }
    }
  }
  for (const CompactionPlan* plan : in_flight) {
    for (const BlockId b : plan->released) {
      STRATA_CHECK(b.value > 0 && b.value < pool(0).num_blocks(), "plan block outside the pool");
      ++refs[0][static_cast<size_t>(b.value)];
    }
  }
  if (tables.empty()) return;
  for (int32_t g = 0; g < num_groups(); ++g) {
    for (int32_t b = 1; b < pool(g).num_blocks(); ++b) {
      STRATA_CHECK(
          pool(g).ref_count(BlockId{b}) == refs[static_cast<size_t>(g)][static_cast<size_t>(b)],
          "a block's reference count differs from the tables' references");
    }
  }
}

PrefixCacheStats KvCacheManager::stats() const {
  PrefixCacheStats s = stats_;
  s.num_evictions = pool().num_evictions();
  s.num_cached_blocks = pool().num_cached_blocks();
  return s;
}

}  // namespace strata::kv

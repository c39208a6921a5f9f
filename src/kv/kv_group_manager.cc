#include "kv/kv_group_manager.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata::kv {

KvGroupManager::KvGroupManager(const KvGroupSpec& spec, const BlockPoolConfig& pool)
    : spec_(spec), pool_(pool) {}

KvGroupManager::Plan KvGroupManager::plan(const BlockTable& table, int32_t g,
                                          std::span<const BlockId> hit_row, int32_t first_pos,
                                          int32_t num_new_tokens) const {
  const int32_t bs = pool_.block_size();
  const bool with_hit = !hit_row.empty();
  const std::span<const BlockId> entries = with_hit ? hit_row : table.blocks(g);
  const int32_t nb = (first_pos + bs - 1) / bs;
  STRATA_CHECK(static_cast<int32_t>(entries.size()) == nb,
               "a group's row must run through the table's last block");
  const int32_t skipped = with_hit ? num_leading_nulls(hit_row) : table.num_skipped_blocks(g);
  Plan p;
  p.first_needed = std::min(spec_.first_needed_block(first_pos, bs), nb);
  STRATA_CHECK(skipped <= p.first_needed || skipped == nb,
               "a block the next query reads was given back");
  if (!with_hit) {
    for (int32_t i = skipped; i < p.first_needed; ++i) {
      p.num_reclaimed += pool_.ref_count(entries[static_cast<size_t>(i)]) == 1;
    }
  }
  p.num_new = (first_pos + num_new_tokens + bs - 1) / bs - nb;
  for (const BlockId b : hit_row) p.num_hit_free += b != kNullBlock && pool_.ref_count(b) == 0;
  p.copy_last = num_new_tokens > 0 && first_pos % bs != 0 && p.first_needed < nb &&
                entries.back() != kNullBlock && pool_.ref_count(entries.back()) > 1;
  return p;
}

void KvGroupManager::allocate(BlockTable& table, int32_t g, const Plan& p,
                              std::span<const BlockId> hit_row, int32_t num_blocks_after) {
  BlockTable::Row& row = table.rows_[static_cast<size_t>(g)];
  if (!hit_row.empty()) {  // the hit's blocks first: allocation below must not evict them
    pool_.touch(hit_row);
    row.blocks.assign(hit_row.begin(), hit_row.end());
    row.num_skipped = num_leading_nulls(row.blocks);
  } else {
    free_before(table, g, p.first_needed);
  }
  if (p.copy_last) {
    const std::optional<std::vector<BlockId>> copy = pool_.allocate(1);
    STRATA_CHECK(copy.has_value(), "copy-on-write block vanished after its plan");
    const BlockId src = row.blocks.back();
    pending_copies_.push_back(BlockCopy{src, copy->front()});
    pool_.free(std::span<const BlockId>(&src, 1));
    row.blocks.back() = copy->front();
  }
  if (p.num_new > 0) {
    const std::optional<std::vector<BlockId>> fresh = pool_.allocate(p.num_new);
    STRATA_CHECK(fresh.has_value(), "blocks vanished after their plan");
    row.blocks.insert(row.blocks.end(), fresh->begin(), fresh->end());
  }
  STRATA_CHECK(static_cast<int32_t>(row.blocks.size()) == num_blocks_after,
               "a group's row must run through the table's last block");
}

void KvGroupManager::free_before(BlockTable& table, int32_t g, int32_t end) {
  BlockTable::Row& row = table.rows_[static_cast<size_t>(g)];
  end = std::min(end, static_cast<int32_t>(row.blocks.size()));
  for (int32_t i = row.num_skipped; i < end; ++i) {
    BlockId& entry = row.blocks[static_cast<size_t>(i)];
    pool_.free(std::span<const BlockId>(&entry, 1));
    entry = kNullBlock;
  }
  row.num_skipped = std::max(row.num_skipped, end);
}

void KvGroupManager::free(BlockTable& table, int32_t g) {
  BlockTable::Row& row = table.rows_[static_cast<size_t>(g)];
  std::reverse(row.blocks.begin(), row.blocks.end());
  pool_.free(row.blocks);
  row.blocks.clear();
  row.num_skipped = 0;
}

void KvGroupManager::fork(const BlockTable& parent, BlockTable& child, int32_t g) {
  const BlockTable::Row& from = parent.rows_[static_cast<size_t>(g)];
  pool_.add_ref(from.blocks);
  child.rows_[static_cast<size_t>(g)] = from;
}

std::vector<BlockCopy> KvGroupManager::take_pending_copies() {
  return std::exchange(pending_copies_, {});
}

void KvGroupManager::cache_copy(const BlockTable& table, int32_t g, int32_t i, BlockId primary,
                                uint32_t primary_gen, const BlockHash& hash,
                                std::span<const int32_t> tokens, const BlockExtraKeys& extra) {
  if (!pool_.prefix_caching() || g >= table.num_groups()) return;
  const std::vector<BlockId>& row = table.rows_[static_cast<size_t>(g)].blocks;
  if (i >= static_cast<int32_t>(row.size())) return;
  const BlockId block = row[static_cast<size_t>(i)];
  if (block == kNullBlock) return;
  link_copy(block, primary, primary_gen, hash, tokens, extra);
}

bool KvGroupManager::link_copy(BlockId block, BlockId primary, uint32_t primary_gen,
                               const BlockHash& hash, std::span<const int32_t> tokens,
                               const BlockExtraKeys& extra) {
  if (copy_of(primary, primary_gen).has_value()) return false;
  // Cached in this pool only to keep it once freed (LRU-evicted on reuse); found through the
  // link. An identical copy cached already (group 0's block was computed or brought back again
  // after its own eviction, while this pool kept the copy) is linked instead of this one.
  if (!pool_.is_cached(block) &&
      !pool_.cache_block(block, hash, nullptr, kNullBlock, tokens, extra)) {
    const std::optional<BlockId> same = pool_.find_cached(hash, kNullBlock, tokens, extra);
    if (!same) return false;
    block = *same;
  }
  links_[primary.value] = CopyLink{block, pool_.cache_gen(block), primary_gen};
  return true;
}

std::optional<BlockId> KvGroupManager::copy_of(BlockId primary, uint32_t primary_gen) const {
  const auto it = links_.find(primary.value);
  if (it == links_.end()) return std::nullopt;
  const CopyLink& link = it->second;
  if (link.primary_gen != primary_gen || !pool_.is_cached(link.copy) ||
      pool_.cache_gen(link.copy) != link.copy_gen) {
    return std::nullopt;
  }
  return link.copy;
}

}  // namespace strata::kv

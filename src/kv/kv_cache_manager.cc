#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/check.h"

namespace strata::kv {

int32_t residual_pool_blocks(int32_t max_num_seqs, int32_t residual_blocks,
                             int32_t max_num_batched_tokens, int32_t block_size) {
  STRATA_CHECK(
      max_num_seqs >= 1 && residual_blocks >= 1 && max_num_batched_tokens >= 1 && block_size >= 1,
      "residual_pool_blocks: positive limits");
  const int64_t blocks = int64_t{max_num_seqs} * (residual_blocks + 1) +
                         (int64_t{max_num_batched_tokens} + block_size - 1) / block_size + 1;
  return static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

bool needs_residual_pool(const KvSpec& spec) {
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    if (spec.layer_dtype(l) == DType::kI4) return true;
  }
  return false;
}

KvSpec residual_spec(const KvSpec& spec, DType dtype) {
  KvSpec r;
  r.num_layers = spec.num_layers;
  r.num_kv_heads = spec.num_kv_heads;
  r.head_dim = spec.head_dim;
  r.dtype = dtype;
  return r;
}

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : pool_(BlockPoolConfig{config.num_blocks, config.block_size, config.enable_prefix_caching,
                            config.event_sink}),
      // With prefix caching, full blocks' residual copies are cached too (no events: the
      // residual pool is the runner's, not a tier others see).
      residual_pool_(BlockPoolConfig{std::max(config.residual_num_blocks, 1), config.block_size,
                                     config.enable_prefix_caching && config.residual_num_blocks > 0,
                                     nullptr}),
      residual_blocks_(config.residual_blocks),
      hasher_(config.hash_bits),
      window_(config.sliding_window) {
  STRATA_CHECK(window_ >= 0, "sliding_window must not be negative");
  STRATA_CHECK(config.residual_num_blocks == 0 ||
                   (config.residual_num_blocks >= 2 && config.residual_blocks >= 1),
               "a residual pool needs at least 2 blocks and residual_blocks >= 1");
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens,
                                             const BlockExtraKeys& extra) {
  PrefixHit hit;
  if (!prefix_caching()) return hit;
  const int32_t bs = block_size();
  const auto max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  BlockId parent = kNullBlock;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const std::span<const int32_t> block_tokens =
        tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs));
    const BlockHash hash =
        hasher_.hash(hit.hashes.empty() ? nullptr : &hit.hashes.back(), block_tokens, extra);
    const std::optional<BlockId> block = pool_.find_cached(hash, parent, block_tokens, extra);
    if (!block) break;
    hit.blocks.push_back(*block);
    hit.hashes.push_back(hash);
    parent = *block;
  }
  if (has_residual() && residual_blocks_ > 1) trim_to_residual_copies(hit);
  hit.num_tokens = static_cast<int32_t>(hit.blocks.size()) * bs;
  if (window_ > 0 && !hit.blocks.empty()) {
    // The first position computed after the hit is hit.num_tokens; the last block always stays.
    const auto skipped = std::min(std::max(hit.num_tokens - window_ + 1, 0) / bs,
                                  static_cast<int32_t>(hit.blocks.size()) - 1);
    std::fill_n(hit.blocks.begin(), skipped, kNullBlock);
  }
  ++stats_.num_queries;
  stats_.num_query_tokens += static_cast<int64_t>(tokens.size());
  stats_.num_hit_tokens += hit.num_tokens;
  return hit;
}

void KvCacheManager::trim_to_residual_copies(PrefixHit& hit) const {
  auto copy_of = [&](int32_t j) { return residual_copy(hit.blocks[static_cast<size_t>(j)]); };
  // A missing copy of block j rules out every h with j in [h - R + 1, h - 1]: try h = j next.
  auto h = static_cast<int32_t>(hit.blocks.size());
  while (h > 0) {
    const int32_t from = std::max(0, h - residual_blocks_ + 1);
    int32_t j = h - 1;
    while (j >= from && copy_of(j).has_value()) --j;
    if (j < from) break;
    h = j;
  }
  hit.blocks.resize(static_cast<size_t>(h));
  hit.hashes.resize(static_cast<size_t>(h));
  hit.residual_blocks.clear();
  for (int32_t j = std::max(0, h - residual_blocks_ + 1); j < h; ++j) {
    hit.residual_blocks.push_back(*copy_of(j));
  }
}

bool KvCacheManager::needs_copy_on_write(const BlockTable& table, int32_t num_new_tokens) const {
  return num_new_tokens > 0 && table.num_tokens() % block_size() != 0 &&
         pool_.ref_count(table.blocks_.back()) > 1;
}

int32_t KvCacheManager::num_blocks_to_allocate(const BlockTable& table, int32_t num_new_tokens,
                                               const PrefixHit* hit) const {
  if (hit == nullptr || hit->blocks.empty()) {
    return std::max(table.num_blocks_needed(num_new_tokens), 0) +
           (needs_copy_on_write(table, num_new_tokens) ? 1 : 0);
  }
  STRATA_CHECK(table.num_tokens() == 0, "a prefix hit goes into an empty block table");
  int32_t num_free_hits = 0;
  for (const BlockId b : hit->blocks) num_free_hits += b != kNullBlock && pool_.ref_count(b) == 0;
  const int32_t bs = block_size();
  const int32_t new_blocks =
      (hit->num_tokens + num_new_tokens + bs - 1) / bs - static_cast<int32_t>(hit->blocks.size());
  return num_free_hits + new_blocks;
}

KvCacheManager::ResidualPlan KvCacheManager::plan_residual(const BlockTable& table,
                                                           int32_t num_new_tokens,
                                                           const PrefixHit* hit) const {
  const int32_t bs = block_size();
  const bool with_hit = hit != nullptr && !hit->blocks.empty();
  const int32_t first_pos = with_hit ? hit->num_tokens : table.num_tokens();
  const int32_t num_blocks_after = (first_pos + num_new_tokens + bs - 1) / bs;
  // The table's block count before the new tokens (a hit's blocks count as the table's, and its
  // cached residual copies as the table's residual entries).
  const int32_t nb = (first_pos + bs - 1) / bs;
  const std::vector<BlockId>& entries = with_hit ? hit->residual_blocks : table.res_blocks_;
  const int32_t rf = entries.empty()  ? nb
                     : with_hit       ? nb - static_cast<int32_t>(entries.size())
                                      : table.res_first_block_;
  STRATA_CHECK(rf + static_cast<int32_t>(entries.size()) == nb,
               "residual entries must run through the table's last block");
  ResidualPlan p;
  p.first_block = std::max(0, first_pos / bs - residual_blocks_ + 1);
  STRATA_CHECK(p.first_block >= rf,
               "a block the next query reads at full precision has no residual block");
  p.num_freed = p.first_block - rf;
  for (int32_t i = 0; i < p.num_freed; ++i) {
    p.num_reclaimed += residual_pool_.ref_count(entries[static_cast<size_t>(i)]) == 1;
  }
  p.num_new = num_blocks_after - nb;
  if (with_hit) {
    for (const BlockId b : entries) p.num_hit_free += residual_pool_.ref_count(b) == 0;
  }
  p.copy_last = num_new_tokens > 0 && first_pos % bs != 0 &&
                p.num_freed < static_cast<int32_t>(entries.size()) &&
                residual_pool_.ref_count(entries.back()) > 1;
  return p;
}

int32_t KvCacheManager::num_residual_blocks_to_allocate(const BlockTable& table,
                                                        int32_t num_new_tokens,
                                                        const PrefixHit* hit) const {
  if (!has_residual()) return 0;
  const ResidualPlan p = plan_residual(table, num_new_tokens, hit);
  return p.num_new + p.num_hit_free + (p.copy_last ? 1 : 0);
}

bool KvCacheManager::residual_fits(const BlockTable& table, int32_t num_new_tokens,
                                   const PrefixHit* hit) const {
  if (!has_residual()) return true;
  const ResidualPlan p = plan_residual(table, num_new_tokens, hit);
  return p.num_new + p.num_hit_free + (p.copy_last ? 1 : 0) <=
         residual_pool_.num_free_blocks() + p.num_reclaimed;
}

void KvCacheManager::allocate_residual(BlockTable& table, const ResidualPlan& p,
                                       const PrefixHit* hit) {
  auto& entries = table.res_blocks_;
  if (hit != nullptr && !hit->blocks.empty()) {  // the hit's cached copies, before any allocation
    residual_pool_.touch(hit->residual_blocks);
    entries = hit->residual_blocks;
  }
  residual_pool_.free(std::span<const BlockId>(entries.data(), static_cast<size_t>(p.num_freed)));
  entries.erase(entries.begin(), entries.begin() + p.num_freed);
  table.res_first_block_ = p.first_block;
  if (p.copy_last) {
    const std::optional<std::vector<BlockId>> copy = residual_pool_.allocate(1);
    STRATA_CHECK(copy.has_value(), "residual copy-on-write block vanished after can_allocate");
    const BlockId src = entries.back();
    pending_residual_copies_.push_back(BlockCopy{src, copy->front()});
    residual_pool_.free(std::span<const BlockId>(&src, 1));
    entries.back() = copy->front();
  }
  if (p.num_new > 0) {
    const std::optional<std::vector<BlockId>> fresh = residual_pool_.allocate(p.num_new);
    STRATA_CHECK(fresh.has_value(), "residual blocks vanished after can_allocate");
    entries.insert(entries.end(), fresh->begin(), fresh->end());
  }
}

bool KvCacheManager::allocate_slots(BlockTable& table, int32_t num_new_tokens,
                                    const PrefixHit* hit) {
  STRATA_CHECK(num_new_tokens >= 0, "allocate_slots: negative token count");
  if (!can_allocate(table, num_new_tokens, hit)) return false;
  // From here on nothing can fail: the checks above counted every block taken below.
  std::optional<ResidualPlan> residual;
  if (has_residual()) residual = plan_residual(table, num_new_tokens, hit);
  if (hit != nullptr && !hit->blocks.empty()) {
    pool_.touch(hit->blocks);
    table.blocks_ = hit->blocks;
    table.block_hashes_ = hit->hashes;
    table.num_tokens_ = hit->num_tokens;
    table.num_cached_blocks_ = static_cast<int32_t>(hit->blocks.size());
    table.num_skipped_blocks_ = static_cast<int32_t>(
        std::find_if(hit->blocks.begin(), hit->blocks.end(),
                     [](BlockId b) { return b != kNullBlock; }) -
        hit->blocks.begin());
    table.chain_tail_ = hit->blocks.back();
  }
  if (needs_copy_on_write(table, num_new_tokens)) {
    const std::optional<std::vector<BlockId>> copy = pool_.allocate(1);
    STRATA_CHECK(copy.has_value(), "copy-on-write block vanished after can_allocate");
    const BlockId src = table.blocks_.back();
    pending_copies_.push_back(BlockCopy{src, copy->front()});
    pool_.free(std::span<const BlockId>(&src, 1));
    table.blocks_.back() = copy->front();
  }
  STRATA_CHECK(table.append_slots(pool_, num_new_tokens), "append failed after can_allocate");
  if (residual) allocate_residual(table, *residual, hit);
  return true;
}

void KvCacheManager::cache_full_blocks(BlockTable& table, std::span<const int32_t> tokens,
                                       int32_t num_computed, const BlockExtraKeys& extra) {
  if (!prefix_caching()) return;
  STRATA_CHECK(num_computed >= 0 && num_computed <= table.num_tokens() &&
                   static_cast<size_t>(num_computed) <= tokens.size(),
               "cache_full_blocks: more computed tokens than slots or token ids");
  const int32_t bs = block_size();
  const int32_t num_full = num_computed / bs;
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
    const BlockId block = table.blocks_[idx];
    if (block == kNullBlock) {  // given back before it was registered: nothing more to register
      table.chain_tail_ = BlockId{};
      continue;
    }
    // An identical block may be cached already (the same prompt computed twice, or a forked table
    // sharing its parent's block): it becomes the chain's parent for what follows.
    if (const std::optional<BlockId> same = pool_.find_cached(hash, parent, block_tokens, extra)) {
      table.chain_tail_ = *same;
    } else if (!pool_.is_cached(block) &&
               pool_.cache_block(block, hash, i == 0 ? nullptr : &table.block_hashes_[idx - 1],
                                 parent, block_tokens, extra)) {
      table.chain_tail_ = block;
    } else {
      table.chain_tail_ = BlockId{};  // the parent was evicted since: stop registering
    }
    // INT4: the block's residual copy, linked to the cached block now holding these positions.
    if (table.chain_tail_.valid()) {
      cache_residual_copy(table, i, table.chain_tail_, hash, block_tokens, extra);
    }
  }
}

void KvCacheManager::cache_residual_copy(const BlockTable& table, int32_t i, BlockId main,
                                         const BlockHash& hash, std::span<const int32_t> tokens,
                                         const BlockExtraKeys& extra) {
  if (!residual_pool_.prefix_caching() || !main.valid() || main == kNullBlock) return;
  const int32_t k = i - table.res_first_block_;
  if (k < 0 || k >= static_cast<int32_t>(table.res_blocks_.size())) return;
  if (residual_copy(main).has_value()) return;
  const BlockId block = table.res_blocks_[static_cast<size_t>(k)];
  // Cached in the residual pool only to keep it once freed (LRU-evicted on reuse); found through
  // the link, never by its hash. An identical copy cached already leaves this one unlinked.
  if (!residual_pool_.is_cached(block) &&
      !residual_pool_.cache_block(block, hash, nullptr, kNullBlock, tokens, extra)) {
    return;
  }
  residual_links_[main.value] =
      ResidualLink{block, residual_pool_.cache_gen(block), pool_.cache_gen(main)};
}

std::optional<BlockId> KvCacheManager::residual_copy(BlockId main) const {
  const auto it = residual_links_.find(main.value);
  if (it == residual_links_.end()) return std::nullopt;
  const ResidualLink& link = it->second;
  if (!pool_.is_cached(main) || pool_.cache_gen(main) != link.main_gen ||
      !residual_pool_.is_cached(link.residual) ||
      residual_pool_.cache_gen(link.residual) != link.residual_gen) {
    return std::nullopt;
  }
  return link.residual;
}

void KvCacheManager::fork(const BlockTable& parent, BlockTable& child) {
  STRATA_CHECK(child.num_tokens() == 0 && child.blocks_.empty(), "fork into a non-empty table");
  STRATA_CHECK(child.block_size() == parent.block_size(), "fork across block sizes");
  pool_.add_ref(parent.blocks_);
  child.blocks_ = parent.blocks_;
  child.block_hashes_ = parent.block_hashes_;
  child.num_tokens_ = parent.num_tokens_;
  child.num_cached_blocks_ = parent.num_cached_blocks_;
  child.num_skipped_blocks_ = parent.num_skipped_blocks_;
  child.chain_tail_ = parent.chain_tail_;
  residual_pool_.add_ref(parent.res_blocks_);
  child.res_first_block_ = parent.res_first_block_;
  child.res_blocks_ = parent.res_blocks_;
}

void KvCacheManager::free_residual_before(BlockTable& table, int32_t first_needed_pos) {
  if (!has_residual() || table.res_blocks_.empty()) return;
  const int32_t first = std::max(0, first_needed_pos / block_size() - residual_blocks_ + 1);
  const auto n = static_cast<size_t>(std::clamp(first - table.res_first_block_, 0,
                                                static_cast<int32_t>(table.res_blocks_.size())));
  residual_pool_.free(std::span<const BlockId>(table.res_blocks_.data(), n));
  table.res_blocks_.erase(table.res_blocks_.begin(),
                          table.res_blocks_.begin() + static_cast<ptrdiff_t>(n));
  table.res_first_block_ += static_cast<int32_t>(n);
}

void KvCacheManager::free_blocks_before(BlockTable& table, int32_t first_needed_pos) {
  const int32_t last_block = static_cast<int32_t>(table.blocks_.size()) - 1;
  // Never the last block: it holds the newest position, which every next query reads.
  const int32_t end = std::min(std::max(first_needed_pos, 0) / block_size(), last_block);
  for (int32_t i = table.num_skipped_blocks_; i < end; ++i) {
    BlockId& entry = table.blocks_[static_cast<size_t>(i)];
    pool_.free(std::span<const BlockId>(&entry, 1));
    entry = kNullBlock;
  }
  table.num_skipped_blocks_ = std::max(table.num_skipped_blocks_, end);
}

void KvCacheManager::adopt_blocks(BlockTable& table, std::vector<BlockId> blocks,
                                  int32_t num_tokens) {
  STRATA_CHECK(table.num_tokens() == 0 && table.blocks_.empty(), "adopt_blocks: table not empty");
  STRATA_CHECK(table.num_blocks_needed(num_tokens) == static_cast<int32_t>(blocks.size()),
               "adopt_blocks: block count does not match the token count");
  table.blocks_ = std::move(blocks);
  table.num_tokens_ = num_tokens;
  table.num_skipped_blocks_ = static_cast<int32_t>(
      std::find_if(table.blocks_.begin(), table.blocks_.end(),
                   [](BlockId b) { return b != kNullBlock; }) -
      table.blocks_.begin());
  table.chain_tail_ = BlockId{};  // nothing further is registered
}

void KvCacheManager::adopt_residual_blocks(BlockTable& table, int32_t first_block,
                                           std::vector<BlockId> blocks) {
  STRATA_CHECK(table.res_blocks_.empty(), "adopt_residual_blocks: the table has residual entries");
  STRATA_CHECK(first_block >= 0 && first_block + static_cast<int32_t>(blocks.size()) ==
                                       static_cast<int32_t>(table.blocks_.size()),
               "adopt_residual_blocks: entries must run through the table's last block");
  table.res_first_block_ = first_block;
  table.res_blocks_ = std::move(blocks);
}

void KvCacheManager::free(BlockTable& table) {
  std::reverse(table.res_blocks_.begin(), table.res_blocks_.end());
  residual_pool_.free(table.res_blocks_);
  table.res_blocks_.clear();
  std::reverse(table.blocks_.begin(), table.blocks_.end());
  table.release(pool_);
}

std::vector<BlockCopy> KvCacheManager::take_pending_copies() {
  return std::exchange(pending_copies_, {});
}

std::vector<BlockCopy> KvCacheManager::take_pending_residual_copies() {
  return std::exchange(pending_residual_copies_, {});
}

void KvCacheManager::check_invariants(std::span<const BlockTable* const> tables) const {
  pool_.check_invariants();
  residual_pool_.check_invariants();
  std::vector<int32_t> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  std::vector<int32_t> res_refs(static_cast<size_t>(residual_pool_.num_blocks()), 0);
  for (const BlockTable* t : tables) {
    for (const BlockId b : t->blocks_) {
      STRATA_CHECK(b.value >= 0 && b.value < pool_.num_blocks(), "table block outside the pool");
      if (b != kNullBlock) ++refs[static_cast<size_t>(b.value)];
    }
    if (!has_residual()) {
      STRATA_CHECK(t->res_blocks_.empty(), "residual entries without a residual pool");
      continue;
    }
    if (!t->res_blocks_.empty()) {
      STRATA_CHECK(t->res_first_block_ >= 0 &&
                       t->res_first_block_ + static_cast<int32_t>(t->res_blocks_.size()) ==
                           static_cast<int32_t>(t->blocks_.size()),
                   "residual entries must run through the table's last block");
    }
    for (const BlockId b : t->res_blocks_) {
      STRATA_CHECK(b != kNullBlock && b.value < residual_pool_.num_blocks(),
                   "residual entry outside the residual pool");
      ++res_refs[static_cast<size_t>(b.value)];
    }
  }
  if (tables.empty()) return;
  for (int32_t b = 1; b < pool_.num_blocks(); ++b) {
    STRATA_CHECK(pool_.ref_count(BlockId{b}) == refs[static_cast<size_t>(b)],
                 "a block's reference count differs from the tables' references");
  }
  for (int32_t b = 1; b < residual_pool_.num_blocks(); ++b) {
    STRATA_CHECK(residual_pool_.ref_count(BlockId{b}) == res_refs[static_cast<size_t>(b)],
                 "a residual block's reference count differs from the tables' references");
  }
}

PrefixCacheStats KvCacheManager::stats() const {
  PrefixCacheStats s = stats_;
  s.num_evictions = pool_.num_evictions();
  s.num_cached_blocks = pool_.num_cached_blocks();
  return s;
}

}  // namespace strata::kv

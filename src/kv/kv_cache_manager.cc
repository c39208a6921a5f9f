#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata::kv {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : pool_(BlockPoolConfig{config.num_blocks, config.block_size, config.enable_prefix_caching,
                            config.event_sink}),
      hasher_(config.hash_bits),
      window_(config.sliding_window) {
  STRATA_CHECK(window_ >= 0, "sliding_window must not be negative");
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

bool KvCacheManager::allocate_slots(BlockTable& table, int32_t num_new_tokens,
                                    const PrefixHit* hit) {
  STRATA_CHECK(num_new_tokens >= 0, "allocate_slots: negative token count");
  if (!can_allocate(table, num_new_tokens, hit)) return false;
  // From here on nothing can fail: the checks above counted every block taken below.
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
  }
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

void KvCacheManager::free(BlockTable& table) {
  std::reverse(table.blocks_.begin(), table.blocks_.end());
  table.release(pool_);
}

std::vector<BlockCopy> KvCacheManager::take_pending_copies() {
  return std::exchange(pending_copies_, {});
}

PrefixCacheStats KvCacheManager::stats() const {
  PrefixCacheStats s = stats_;
  s.num_evictions = pool_.num_evictions();
  s.num_cached_blocks = pool_.num_cached_blocks();
  return s;
}

}  // namespace strata::kv

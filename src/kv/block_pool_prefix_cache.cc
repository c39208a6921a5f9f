// BlockPool's prefix-cache half: the hash index, hit confirmation, touch, registration, eviction
// and its invariants. The free-queue half is in block_pool.cc.

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "kv/block_pool.h"

namespace strata::kv {

std::span<const int32_t> BlockPool::stored_tokens(int32_t idx) const {
  return {tokens_.data() + static_cast<size_t>(idx) * static_cast<size_t>(block_size_),
          static_cast<size_t>(block_size_)};
}

bool BlockPool::matches(int32_t idx, BlockId parent, std::span<const int32_t> tokens,
                        const BlockExtraKeys& extra) const {
  const BlockMeta& m = meta(idx);
  if (m.parent != parent.value || m.adapter_id != extra.adapter_id) return false;
  if (parent != kNullBlock && m.parent_gen != meta(parent.value).cache_gen) return false;
  // The salt enters only a first block; later blocks inherit it through the verified parent.
  if (parent == kNullBlock && salts_[static_cast<size_t>(idx)] != extra.cache_salt) return false;
  const std::span<const int32_t> stored = stored_tokens(idx);
  return std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end());
}

std::optional<BlockId> BlockPool::find_cached(const BlockHash& hash, BlockId parent,
                                              std::span<const int32_t> tokens,
                                              const BlockExtraKeys& extra) const {
  STRATA_CHECK(prefix_caching_, "find_cached: prefix caching is off");
  const auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return std::nullopt;
  for (int32_t i = it->second; i != kNone; i = meta(i).hash_next) {
    if (matches(i, parent, tokens, extra)) return BlockId{i};
  }
  return std::nullopt;  // a collision: same hash, other content
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    if (b == kNullBlock) continue;  // an entry a sliding window skips
    STRATA_CHECK(b.value > 0 && b.value < num_blocks(), "touch: block id out of range");
    BlockMeta& m = meta(b.value);
    STRATA_CHECK(m.cached, "touch of a block that is not cached");
    if (m.ref_count == 0) remove(b.value);
    ++m.ref_count;
  }
}

bool BlockPool::cache_block(BlockId block, const BlockHash& hash, const BlockHash* parent_hash,
                            BlockId parent, std::span<const int32_t> tokens,
                            const BlockExtraKeys& extra) {
  STRATA_CHECK(prefix_caching_, "cache_block: prefix caching is off");
  STRATA_CHECK(block.value > 0 && block.value < num_blocks(), "cache_block: block id out of range");
  STRATA_CHECK(static_cast<int32_t>(tokens.size()) == block_size_, "cache_block: block not full");
  STRATA_CHECK((parent == kNullBlock) == (parent_hash == nullptr),
               "cache_block: a first block has no parent hash, every other block has one");
  BlockMeta& m = meta(block.value);
  STRATA_CHECK(m.ref_count > 0 && !m.cached, "cache_block: block free or already cached");
  STRATA_CHECK(parent.value >= 0 && parent.value < num_blocks(), "cache_block: bad parent id");
  if (parent != kNullBlock && !meta(parent.value).cached) return false;  // chain broken
  if (find_cached(hash, parent, tokens, extra)) return false;  // an identical block is cached
  m.cached = true;
  ++m.cache_gen;
  m.hash = hash;
  m.parent = parent.value;
  m.parent_gen = meta(parent.value).cache_gen;
  m.adapter_id = extra.adapter_id;
  if (parent == kNullBlock) salts_[static_cast<size_t>(block.value)] = extra.cache_salt;
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<std::ptrdiff_t>(block.value) * block_size_);
  auto [it, inserted] = hash_to_block_.try_emplace(hash, block.value);
  m.hash_next = inserted ? kNone : std::exchange(it->second, block.value);
  ++num_cached_;
  if (event_sink_ != nullptr) {
    event_sink_->on_block_stored(
        BlockStoredEvent{hash, parent_hash ? std::optional<BlockHash>(*parent_hash) : std::nullopt,
                         tokens, block});
  }
  if (listener_ != nullptr) listener_->on_cached(block, hash, tokens);
  return true;
}

bool BlockPool::is_cached(BlockId block) const {
  STRATA_CHECK(block.value >= 0 && block.value < num_blocks(), "is_cached: block id out of range");
  return meta(block.value).cached;
}

void BlockPool::evict(int32_t idx) {
  BlockMeta& m = meta(idx);
  if (listener_ != nullptr) {
    const std::span<const int32_t> tokens = stored_tokens(idx);
    evicted_.push_back(EvictedBlock{BlockId{idx}, m.hash, {tokens.begin(), tokens.end()}});
  }
  const auto it = hash_to_block_.find(m.hash);
  STRATA_CHECK(it != hash_to_block_.end(), "cached block missing from the hash index");
  if (it->second == idx) {
    if (m.hash_next == kNone) {
      hash_to_block_.erase(it);
    } else {
      it->second = m.hash_next;
    }
  } else {
    int32_t prev = it->second;
    while (meta(prev).hash_next != idx) {
      prev = meta(prev).hash_next;
      STRATA_CHECK(prev != kNone, "cached block missing from its hash chain");
    }
    meta(prev).hash_next = m.hash_next;
  }
  --num_cached_;
  ++num_evictions_;
  if (event_sink_ != nullptr)
    event_sink_->on_block_removed(BlockRemovedEvent{m.hash, BlockId{idx}});
  forget_cached(idx);
}

void BlockPool::forget_cached(int32_t idx) {
  BlockMeta& m = meta(idx);
  m.cached = false;
  m.hash_next = kNone;
  m.parent = 0;
  m.parent_gen = 0;
  m.adapter_id = 0;
  m.hash = BlockHash{};
  salts_[static_cast<size_t>(idx)].clear();
}

bool BlockPool::reset_prefix_cache() {
  if (num_used_blocks() != 0) return false;
  for (int32_t idx = 0; idx < static_cast<int32_t>(meta_.size()); ++idx) {
    if (meta(idx).cached) forget_cached(idx);
  }
  hash_to_block_.clear();
  num_cached_ = 0;
  if (event_sink_ != nullptr) event_sink_->on_all_blocks_cleared();
  return true;
}

void BlockPool::check_cache_invariants() const {
  STRATA_CHECK(!meta(0).cached, "null block is cached");
  STRATA_CHECK(prefix_caching_ || (num_cached_ == 0 && hash_to_block_.empty()),
               "blocks cached with prefix caching off");
  std::vector<int32_t> seen(meta_.size(), 0);
  int32_t reachable = 0;
  for (const auto& [hash, head] : hash_to_block_) {
    STRATA_CHECK(head != kNone, "empty hash chain in the index");
    for (int32_t i = head; i != kNone; i = meta(i).hash_next) {
      STRATA_CHECK(i > 0 && i < num_blocks(), "hash index holds an invalid block id");
      STRATA_CHECK(meta(i).cached, "hash index holds an uncached block");
      STRATA_CHECK(meta(i).hash == hash, "block indexed under another hash");
      STRATA_CHECK(++seen[static_cast<size_t>(i)] == 1, "block reachable twice from the index");
      STRATA_CHECK(++reachable <= num_cached_, "hash chains longer than num_cached (cycle?)");
    }
  }
  STRATA_CHECK(reachable == num_cached_, "num_cached_blocks != blocks in the hash index");
  for (int32_t i = 1; i < num_blocks(); ++i) {
    STRATA_CHECK(meta(i).cached == (seen[static_cast<size_t>(i)] == 1),
                 "cached block not in the hash index");
  }
}

}  // namespace strata::kv

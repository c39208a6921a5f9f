#include "kv/block_pool.h"

#include <string>

#include "core/check.h"

namespace strata::kv {

BlockPool::BlockPool(int32_t num_blocks) : BlockPool(BlockPoolConfig{.num_blocks = num_blocks}) {}

BlockPool::BlockPool(const BlockPoolConfig& config)
    : block_size_(config.block_size),
      prefix_caching_(config.enable_prefix_caching),
      event_sink_(config.event_sink) {
  STRATA_CHECK(config.num_blocks >= 1, "BlockPool needs at least the null block");
  STRATA_CHECK(config.block_size > 0, "block_size must be positive");
  meta_.resize(static_cast<size_t>(config.num_blocks));
  for (int32_t i = 1; i < config.num_blocks; ++i) push_back(i);
  if (prefix_caching_) {
    tokens_.resize(static_cast<size_t>(config.num_blocks) * static_cast<size_t>(block_size_));
    salts_.resize(static_cast<size_t>(config.num_blocks));
  }
}

std::optional<std::vector<BlockId>> BlockPool::allocate(int32_t n) {
  STRATA_CHECK(n >= 0, "allocate: negative block count");
  if (!can_allocate(n)) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t idx = head_;
    remove(idx);
    if (meta(idx).cached) evict(idx);
    meta(idx).ref_count = 1;
    out.emplace_back(idx);
  }
  if (!evicted_.empty()) {
    listener_->on_evicted(evicted_);
    evicted_.clear();
  }
  return out;
}

void BlockPool::add_ref(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (b == kNullBlock) continue;
    STRATA_CHECK(b.value > 0 && b.value < num_blocks(), "add_ref: block id out of range");
    BlockMeta& m = meta_[static_cast<size_t>(b.value)];
    STRATA_CHECK(m.ref_count > 0, "add_ref on a free block");
    ++m.ref_count;
  }
}

void BlockPool::free(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (b == kNullBlock) continue;
    STRATA_CHECK(b.value > 0 && b.value < num_blocks(), "free: block id out of range");
    BlockMeta& m = meta_[static_cast<size_t>(b.value)];
    STRATA_CHECK(m.ref_count > 0, "free of a block that is already free (double free)");
    if (--m.ref_count == 0) push_back(b.value);
  }
}

int32_t BlockPool::ref_count(BlockId block) const {
  STRATA_CHECK(block.value >= 0 && block.value < num_blocks(), "ref_count: block id out of range");
  return meta_[static_cast<size_t>(block.value)].ref_count;
}

std::vector<BlockId> BlockPool::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (int32_t i = head_; i != kNone; i = meta_[static_cast<size_t>(i)].next_free) out.emplace_back(i);
  return out;
}

void BlockPool::push_back(int32_t idx) {
  BlockMeta& m = meta_[static_cast<size_t>(idx)];
  STRATA_CHECK(!m.in_queue, "block already in the free queue");
  m.prev_free = tail_;
  m.next_free = kNone;
  m.in_queue = true;
  if (tail_ != kNone) {
    meta_[static_cast<size_t>(tail_)].next_free = idx;
  } else {
    head_ = idx;
  }
  tail_ = idx;
  ++num_free_;
}

void BlockPool::remove(int32_t idx) {
  BlockMeta& m = meta_[static_cast<size_t>(idx)];
  STRATA_CHECK(m.in_queue, "block not in the free queue");
  if (m.prev_free != kNone) {
    meta_[static_cast<size_t>(m.prev_free)].next_free = m.next_free;
  } else {
    head_ = m.next_free;
  }
  if (m.next_free != kNone) {
    meta_[static_cast<size_t>(m.next_free)].prev_free = m.prev_free;
  } else {
    tail_ = m.prev_free;
  }
  m.prev_free = m.next_free = kNone;
  m.in_queue = false;
  --num_free_;
}

void BlockPool::check_invariants() const {
  const BlockMeta& null_meta = meta_[0];
  STRATA_CHECK(null_meta.ref_count == 0 && !null_meta.in_queue, "null block was allocated or queued");
  int32_t count = 0;
  int32_t prev = kNone;
  for (int32_t i = head_; i != kNone; i = meta_[static_cast<size_t>(i)].next_free) {
    STRATA_CHECK(i > 0 && i < num_blocks(), "free queue holds an invalid block id");
    const BlockMeta& m = meta_[static_cast<size_t>(i)];
    STRATA_CHECK(m.in_queue, "queued block not marked in_queue");
    STRATA_CHECK(m.prev_free == prev, "free queue links are not symmetric");
    STRATA_CHECK(m.ref_count == 0, "queued block has references");
    STRATA_CHECK(++count <= num_free_, "free queue longer than num_free (cycle?)");
    prev = i;
  }
  STRATA_CHECK(prev == tail_, "free queue tail mismatch");
  STRATA_CHECK(count == num_free_, "free queue length != num_free_blocks");
  for (int32_t i = 1; i < num_blocks(); ++i) {
    const BlockMeta& m = meta_[static_cast<size_t>(i)];
    STRATA_CHECK(m.in_queue == (m.ref_count == 0), "block free iff ref count 0 violated");
    STRATA_CHECK(m.ref_count >= 0, "negative ref count");
  }
  check_cache_invariants();
}

}  // namespace strata::kv

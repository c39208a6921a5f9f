#include "kv/host_tier.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata::kv {

HostTier::HostTier(const KvLayout& layout, int32_t capacity_blocks)
    : buffer_(layout, capacity_blocks), slots_(static_cast<size_t>(capacity_blocks)) {
  STRATA_CHECK(capacity_blocks >= 1, "a host tier holds at least one block");
  free_.reserve(slots_.size());
  for (int32_t i = capacity_blocks - 1; i >= 0; --i) free_.push_back(i);
  index_.reserve(slots_.size());
}

std::optional<BlockId> HostTier::find(const TierKey& key, std::span<const int32_t> tokens) {
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  const int32_t idx = it->second;
  Slot& s = slots_[static_cast<size_t>(idx)];
  if (!s.committed) return std::nullopt;
  if (!std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin(), tokens.end())) {
    if (s.pins == 0) release(idx);  // a pinned slot is its I/O's until the pin owner lets it go
    return std::nullopt;
  }
  if (s.pins == 0) lru_.splice(lru_.end(), lru_, s.lru);
  return BlockId{idx};
}

bool HostTier::pending(const TierKey& key) const {
  const auto it = index_.find(key);
  return it != index_.end() && !slots_[static_cast<size_t>(it->second)].committed;
}

std::optional<BlockId> HostTier::least_recent() const {
  if (lru_.empty()) return std::nullopt;
  return BlockId{lru_.front()};
}

std::optional<BlockId> HostTier::insert(const TierKey& key, std::span<const int32_t> tokens) {
  STRATA_CHECK(!index_.contains(key), "HostTier::insert: the key is already in the tier");
  if (free_.empty()) {
    if (lru_.empty()) return std::nullopt;  // every slot pinned
    release(lru_.front());
  }
  const int32_t idx = free_.back();
  free_.pop_back();
  Slot& s = slots_[static_cast<size_t>(idx)];
  s.used = true;
  s.committed = false;
  s.key = key;
  s.tokens.assign(tokens.begin(), tokens.end());
  s.inserted_at = std::chrono::steady_clock::now();
  s.lru = lru_.insert(lru_.end(), idx);
  index_.emplace(key, idx);
  return BlockId{idx};
}

void HostTier::pin(BlockId id) {
  Slot& s = slot(id);
  STRATA_CHECK(s.used && !s.erased, "HostTier::pin: an unused or erased slot");
  if (s.pins++ > 0) return;
  lru_.erase(s.lru);
  ++num_pinned_;
}

void HostTier::unpin(BlockId id, bool least_recent) {
  Slot& s = slot(id);
  STRATA_CHECK(s.used && s.pins > 0, "HostTier::unpin: a slot that is not pinned");
  if (--s.pins > 0) return;
  --num_pinned_;
  if (s.erased) {
    s = Slot{};
    free_.push_back(id.value);
    return;
  }
  s.lru = lru_.insert(least_recent ? lru_.begin() : lru_.end(), id.value);
}

void HostTier::commit(BlockId id) { commit(id, tier_checksum(bytes(id))); }

void HostTier::commit(BlockId id, uint64_t checksum, bool prefetched) {
  Slot& s = slot(id);
  STRATA_CHECK(s.used, "HostTier::commit: an unused slot");
  s.checksum = checksum;
  committed_now(s);
  if (prefetched && !s.prefetched) ++num_prefetched_;
  s.prefetched = s.prefetched || prefetched;
}

bool HostTier::take_prefetched(BlockId id) {
  Slot& s = slot(id);
  if (!s.prefetched) return false;
  s.prefetched = false;
  --num_prefetched_;
  return true;
}

bool HostTier::verify(BlockId id) const {
  const Slot& s = slot_ref(id);
  return s.used && s.committed && tier_checksum(bytes(id)) == s.checksum;
}

namespace {

// out[i] = tier_checksum(bytes(i)) for i < n, on pool's threads (null: this one).
template <typename Bytes>
void checksums(int64_t n, ThreadPool* pool, const Bytes& bytes, std::vector<uint64_t>& out) {
  out.resize(static_cast<size_t>(n));
  const auto work = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] = tier_checksum(bytes(i));
  };
  if (pool == nullptr) {
    work(0, n);
  } else {
    pool->parallel_for(n, work);
  }
}

}  // namespace

void HostTier::commit(std::span<const BlockId> slots, ThreadPool* pool) {
  std::vector<uint64_t> sums;
  checksums(static_cast<int64_t>(slots.size()), pool,
            [&](int64_t i) { return std::as_const(*this).bytes(slots[static_cast<size_t>(i)]); },
            sums);
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slot(slots[i]);
    STRATA_CHECK(s.used, "HostTier::commit: an unused slot");
    s.checksum = sums[i];
    committed_now(s);
  }
}

void HostTier::committed_now(Slot& s) {
  if (s.committed) return;
  s.committed = true;
  if (event_sink_ != nullptr) event_sink_->on_tier_block_stored(KvMedium::kHost, s.key.hash);
}

HostTier::Check HostTier::check_of(BlockId id) const {
  const Slot& s = slot_ref(id);
  STRATA_CHECK(s.used && s.committed, "HostTier::check_of: a slot not committed");
  return Check{bytes(id), s.checksum};
}

size_t HostTier::verified_prefix(std::span<const Check> checks, ThreadPool* pool) {
  std::vector<uint64_t> sums;
  checksums(static_cast<int64_t>(checks.size()), pool,
            [&](int64_t i) { return checks[static_cast<size_t>(i)].bytes; }, sums);
  for (size_t i = 0; i < checks.size(); ++i) {
    if (sums[i] != checks[i].checksum) return i;
  }
  return checks.size();
}

void HostTier::erase(BlockId id) {
  Slot& s = slot(id);
  if (!s.used) return;
  if (s.erased) {  // the caller's is one of the pins that hold it
    unpin(id);
    return;
  }
  if (s.pins <= 1) {
    release(id.value);
    return;
  }
  // Other pins hold it: out of the index now, free at their last unpin.
  if (s.committed && event_sink_ != nullptr) {
    event_sink_->on_tier_block_removed(KvMedium::kHost, s.key.hash);
  }
  index_.erase(s.key);
  if (s.prefetched) --num_prefetched_;
  s.prefetched = false;
  s.committed = false;
  s.erased = true;
  --s.pins;
}

void HostTier::release(int32_t idx) {
  Slot& s = slots_[static_cast<size_t>(idx)];
  if (s.committed && event_sink_ != nullptr) {
    event_sink_->on_tier_block_removed(KvMedium::kHost, s.key.hash);
  }
  index_.erase(s.key);
  if (s.prefetched) --num_prefetched_;
  if (s.pins > 0) {
    --num_pinned_;
  } else {
    lru_.erase(s.lru);
  }
  s = Slot{};
  free_.push_back(idx);
}

std::span<std::byte> HostTier::bytes(BlockId id) {
  const int64_t n = block_bytes();
  return {buffer_.data() + id.value * n, static_cast<size_t>(n)};
}

std::span<const std::byte> HostTier::bytes(BlockId id) const {
  const int64_t n = block_bytes();
  return {buffer_.data() + id.value * n, static_cast<size_t>(n)};
}

void HostTier::check_invariants() const {
  // Erased slots: out of the index, held by pins, neither committed nor free.
  const auto erased =
      static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) {
        STRATA_CHECK(!s.erased || (s.used && s.pins > 0 && !s.committed),
                     "HostTier: an erased slot is unpinned or committed");
        return s.erased;
      }));
  STRATA_CHECK(index_.size() + erased == lru_.size() + static_cast<size_t>(num_pinned_),
               "HostTier: index and LRU list + pins differ in size");
  STRATA_CHECK(index_.size() + erased + free_.size() == slots_.size(),
               "HostTier: a slot is lost or doubled");
  const auto pinned = std::count_if(slots_.begin(), slots_.end(),
                                    [](const Slot& s) { return s.used && s.pins > 0; });
  STRATA_CHECK(pinned == num_pinned_, "HostTier: the pin count is off");
  const auto prefetched = std::count_if(slots_.begin(), slots_.end(),
                                        [](const Slot& s) { return s.used && s.prefetched; });
  STRATA_CHECK(prefetched == num_prefetched_, "HostTier: the prefetched count is off");
  for (const int32_t idx : lru_) {
    const Slot& s = slots_[static_cast<size_t>(idx)];
    STRATA_CHECK(s.used && s.pins == 0, "HostTier: an unused or pinned slot in the LRU list");
    const auto it = index_.find(s.key);
    STRATA_CHECK(it != index_.end() && it->second == idx, "HostTier: a slot's key is not indexed");
  }
  for (const int32_t idx : free_) {
    STRATA_CHECK(!slots_[static_cast<size_t>(idx)].used, "HostTier: a used slot is free");
  }
}

}  // namespace strata::kv

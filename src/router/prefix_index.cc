#include "router/prefix_index.h"

#include <iterator>
#include <type_traits>
#include <variant>

namespace strata::router {

void PrefixIndex::add(uint64_t hash, kv::KvMedium m) {
  uint8_t& media = blocks_[hash];
  if ((media & bit(m)) == 0) ++num_by_medium_[static_cast<size_t>(m)];
  media |= bit(m);
}

void PrefixIndex::remove(uint64_t hash, kv::KvMedium m) {
  const auto it = blocks_.find(hash);
  if (it == blocks_.end() || (it->second & bit(m)) == 0) return;
  --num_by_medium_[static_cast<size_t>(m)];
  it->second &= static_cast<uint8_t>(~bit(m));
  if (it->second == 0) blocks_.erase(it);
}

void PrefixIndex::apply(const kv::WireKvEventBatch& batch) {
  const std::lock_guard lock(mu_);
  for (const kv::WireKvEvent& e : batch.events) {
    std::visit(
        [this](const auto& ev) {
          using T = std::decay_t<decltype(ev)>;
          if constexpr (std::is_same_v<T, kv::WireBlockStored>) {
            if (ev.medium == kv::KvMedium::kRemote) return;
            if (blocks_.size() + ev.block_hashes.size() > kMaxBlocks) {
              blocks_.clear();
              num_by_medium_ = {};
            }
            block_size_ = ev.block_size;
            for (const uint64_t h : ev.block_hashes) add(h, ev.medium);
          } else if constexpr (std::is_same_v<T, kv::WireBlockRemoved>) {
            if (ev.medium == kv::KvMedium::kRemote) return;
            for (const uint64_t h : ev.block_hashes) remove(h, ev.medium);
          } else {
            for (auto it = blocks_.begin(); it != blocks_.end();) {
              const auto next = std::next(it);
              remove(it->first, kv::KvMedium::kDevice);
              it = next;
            }
          }
        },
        e);
  }
}

void PrefixIndex::clear() {
  const std::lock_guard lock(mu_);
  blocks_.clear();
  num_by_medium_ = {};
}

PrefixMatch PrefixIndex::match(std::span<const uint64_t> chain) const {
  const std::lock_guard lock(mu_);
  PrefixMatch m;
  for (const uint64_t h : chain) {
    const auto it = blocks_.find(h);
    if (it == blocks_.end()) break;
    if ((it->second & bit(kv::KvMedium::kDevice)) != 0) {
      ++m.device;
    } else if ((it->second & bit(kv::KvMedium::kHost)) != 0) {
      ++m.host;
    } else {
      ++m.disk;
    }
  }
  return m;
}

int32_t PrefixIndex::block_size() const {
  const std::lock_guard lock(mu_);
  return block_size_;
}

size_t PrefixIndex::num_blocks(kv::KvMedium medium) const {
  const std::lock_guard lock(mu_);
  return medium == kv::KvMedium::kRemote ? 0 : num_by_medium_[static_cast<size_t>(medium)];
}

}  // namespace strata::router

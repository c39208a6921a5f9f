#include "router/prefix_index.h"

#include <type_traits>
#include <variant>

namespace strata::router {

void PrefixIndex::apply(const kv::WireKvEventBatch& batch) {
  const std::lock_guard lock(mu_);
  for (const kv::WireKvEvent& e : batch.events) {
    std::visit(
        [this](const auto& ev) {
          using T = std::decay_t<decltype(ev)>;
          if constexpr (std::is_same_v<T, kv::WireBlockStored>) {
            if (blocks_.size() + ev.block_hashes.size() > kMaxBlocks) blocks_.clear();
            block_size_ = ev.block_size;
            blocks_.insert(ev.block_hashes.begin(), ev.block_hashes.end());
          } else if constexpr (std::is_same_v<T, kv::WireBlockRemoved>) {
            for (const uint64_t h : ev.block_hashes) blocks_.erase(h);
          } else {
            blocks_.clear();
          }
        },
        e);
  }
}

void PrefixIndex::clear() {
  const std::lock_guard lock(mu_);
  blocks_.clear();
}

int32_t PrefixIndex::match(std::span<const uint64_t> chain) const {
  const std::lock_guard lock(mu_);
  int32_t n = 0;
  for (const uint64_t h : chain) {
    if (!blocks_.contains(h)) break;
    ++n;
  }
  return n;
}

int32_t PrefixIndex::block_size() const {
  const std::lock_guard lock(mu_);
  return block_size_;
}

size_t PrefixIndex::num_blocks() const {
  const std::lock_guard lock(mu_);
  return blocks_.size();
}

}  // namespace strata::router

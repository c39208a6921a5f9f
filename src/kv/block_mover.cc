#include "kv/block_mover.h"

#include <cstring>

namespace strata::kv {
namespace {

void copy(std::span<const BlockCopy> pairs, const std::byte* from, std::byte* to, int64_t bytes) {
  for (const BlockCopy& p : pairs) {
    std::memcpy(to + p.dst.value * bytes, from + p.src.value * bytes, static_cast<size_t>(bytes));
  }
}

}  // namespace

void HostBlockMover::to_host(std::span<const BlockCopy> pairs, HostKvBuffer& host) {
  copy(pairs, pool_.data(), host.data(), pool_.layout().block_bytes());
}

void HostBlockMover::from_host(std::span<const BlockCopy> pairs, const HostKvBuffer& host) {
  copy(pairs, host.data(), pool_.data(), pool_.layout().block_bytes());
}

void HostBlockMover::to_region(std::span<const BlockCopy> pairs, std::byte* slots) {
  copy(pairs, pool_.data(), slots, pool_.layout().block_bytes());
}

uint64_t HostBlockMover::start_from_region(std::span<const RegionCopy> copies) {
  const int64_t bytes = pool_.layout().block_bytes();
  for (const RegionCopy& c : copies) {
    std::memcpy(pool_.data() + c.dst.value * bytes, c.src, static_cast<size_t>(bytes));
  }
  return kDoneTicket;
}

std::span<const std::byte> HostBlockMover::host_block(BlockId block) const {
  const int64_t bytes = pool_.layout().block_bytes();
  return {pool_.data() + block.value * bytes, static_cast<size_t>(bytes)};
}

}  // namespace strata::kv

#include "kv/contiguous_allocator.h"

#include <iterator>

#include "core/check.h"

namespace strata::kv {

ContiguousAllocator::ContiguousAllocator(int64_t capacity_slots) : capacity_(capacity_slots) {
  STRATA_CHECK(capacity_slots >= 0, "negative capacity");
  if (capacity_slots > 0) free_.emplace(0, capacity_slots);
}

std::optional<int64_t> ContiguousAllocator::reserve(int64_t num_slots) {
  STRATA_CHECK(num_slots > 0, "reserve: need a positive slot count");
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < num_slots) continue;
    const int64_t offset = it->first;
    const int64_t rest = it->second - num_slots;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + num_slots, rest);
    reserved_ += num_slots;
    return offset;
  }
  return std::nullopt;
}

void ContiguousAllocator::release(int64_t offset, int64_t num_slots) {
  STRATA_CHECK(offset >= 0 && num_slots > 0 && offset + num_slots <= capacity_,
               "release: range outside the pool");
  auto next = free_.lower_bound(offset);
  STRATA_CHECK(next == free_.end() || next->first >= offset + num_slots, "release: range is free");
  int64_t start = offset, len = num_slots;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    STRATA_CHECK(prev->first + prev->second <= offset, "release: range is free");
    if (prev->first + prev->second == offset) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == offset + num_slots) {
    len += next->second;
    free_.erase(next);
  }
  free_.emplace(start, len);
  reserved_ -= num_slots;
}

void ContiguousAllocator::check_invariants() const {
  int64_t free_total = 0, end = -1;
  for (const auto& [offset, len] : free_) {
    STRATA_CHECK(len > 0 && offset > end && offset + len <= capacity_,
                 "free ranges overlap, touch or leave the pool");
    end = offset + len;
    free_total += len;
  }
  STRATA_CHECK(free_total + reserved_ == capacity_, "reserved + free != capacity");
}

}  // namespace strata::kv

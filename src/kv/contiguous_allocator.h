#pragma once
// ContiguousAllocator: the baseline paging is measured against -- each request reserves one
// contiguous range of max_model_len token slots up front, as engines did before paged attention
// (and as static batching still does). Exists for the benchmarks only, so that the gain of paging
// is measured under the same workload, not claimed.
//
// Owns a first-fit list of free ranges (offset -> length, coalesced on free). Invariants: free
// ranges are disjoint, non-adjacent and inside [0, capacity); reserved + free == capacity.
// Not thread-safe. Cost: O(free ranges) per reserve, O(log ranges) per release.

#include <cstdint>
#include <map>
#include <optional>

namespace strata::kv {

class ContiguousAllocator {
 public:
  explicit ContiguousAllocator(int64_t capacity_slots);

  int64_t capacity_slots() const { return capacity_; }
  int64_t reserved_slots() const { return reserved_; }

  // The offset of a free range of num_slots slots (first fit), or nullopt, changing nothing.
  [[nodiscard]] std::optional<int64_t> reserve(int64_t num_slots);
  // Gives back a range returned by reserve.
  void release(int64_t offset, int64_t num_slots);

  void check_invariants() const;

 private:
  int64_t capacity_;
  int64_t reserved_ = 0;
  std::map<int64_t, int64_t> free_;  // offset -> length
};

}  // namespace strata::kv

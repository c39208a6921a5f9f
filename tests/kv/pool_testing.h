#pragma once
// Test helpers shared by the src/kv suites: a full snapshot of a BlockPool's observable state
// (to assert that failed or side-effect-free operations change nothing) and a way to put the free
// queue into a chosen order so tests can assert exact block ids.

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <vector>

#include "core/ids.h"
#include "kv/block_pool.h"

namespace strata::kv::test_util {

inline std::vector<BlockId> ids(std::initializer_list<int32_t> values) {
  std::vector<BlockId> out;
  for (const int32_t v : values) out.emplace_back(v);
  return out;
}

// A KV cache group's row from the first block it holds on (its leading null entries dropped).
inline std::span<const BlockId> held(std::span<const BlockId> row) {
  size_t first = 0;
  while (first < row.size() && row[first] == kNullBlock) ++first;
  return row.subspan(first);
}

inline std::vector<int32_t> values(std::span<const BlockId> blocks) {
  std::vector<int32_t> out;
  for (const BlockId b : blocks) out.push_back(b.value);
  return out;
}

struct PoolSnapshot {
  std::vector<int32_t> free_queue;
  std::vector<int32_t> ref_counts;  // every block, the null block included
  std::vector<int32_t> cached;      // ids of the blocks in the prefix cache
  int32_t num_free_blocks = 0;
  int32_t num_used_blocks = 0;
  int32_t num_cached_blocks = 0;
  int64_t num_evictions = 0;

  explicit PoolSnapshot(const BlockPool& pool)
      : free_queue(values(pool.free_queue())),
        num_free_blocks(pool.num_free_blocks()),
        num_used_blocks(pool.num_used_blocks()),
        num_cached_blocks(pool.num_cached_blocks()),
        num_evictions(pool.num_evictions()) {
    for (int32_t i = 0; i < pool.num_blocks(); ++i) {
      ref_counts.push_back(pool.ref_count(BlockId{i}));
      if (pool.is_cached(BlockId{i})) cached.push_back(i);
    }
  }
  bool operator==(const PoolSnapshot&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const PoolSnapshot& s) {
  os << "free " << s.num_free_blocks << " used " << s.num_used_blocks << " queue [";
  for (const int32_t b : s.free_queue) os << b << ' ';
  os << "] refs [";
  for (const int32_t r : s.ref_counts) os << r << ' ';
  os << "] cached [";
  for (const int32_t b : s.cached) os << b << ' ';
  return os << "] evictions " << s.num_evictions;
}

// Allocates every free block, then frees them in `order` followed by the rest in id order, so the
// free queue becomes `order` + the remaining ids. The pool must have nothing allocated.
inline void set_free_queue_order(BlockPool& pool, std::initializer_list<int32_t> order) {
  ASSERT_EQ(pool.num_used_blocks(), 0);
  auto all = pool.allocate(pool.num_free_blocks());
  ASSERT_TRUE(all.has_value());
  std::vector<BlockId> sequence = ids(order);
  std::vector<bool> taken(static_cast<size_t>(pool.num_blocks()), false);
  for (const int32_t v : order) taken[static_cast<size_t>(v)] = true;
  for (int32_t i = 1; i < pool.num_blocks(); ++i) {
    if (!taken[static_cast<size_t>(i)]) sequence.emplace_back(i);
  }
  pool.free(sequence);
  pool.check_invariants();
  ASSERT_EQ(values(pool.free_queue()), values(sequence));
}

}  // namespace strata::kv::test_util

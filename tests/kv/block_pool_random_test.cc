// A seeded randomized test of the KV space layer: thousands of mixed allocate / free / add_ref
// (fork) / append_slots / release operations over many block tables and raw block holders, checked
// after every operation against
//   - the pool's own invariant checker,
//   - a shadow model (ref counts and the free queue as a std::deque, updated from the documented
//     semantics: allocate pops the front, a count reaching 0 pushes to the back), and
//   - the ref counts recomputed from scratch by counting every owner's references.
// At the end every owner lets go and no block may be leaked.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::PoolSnapshot;
using test_util::values;

constexpr std::array<int32_t, 5> kBlockSizes = {8, 16, 32, 64, 128};
constexpr int32_t kNumBlocks = 97;  // small enough that appends often fail
constexpr int kNumOps = 4000;

class RandomPoolSim {
 public:
  explicit RandomPoolSim(uint64_t seed)
      : rng_(seed), pool_(kNumBlocks), shadow_refs_(kNumBlocks, 0) {
    for (int32_t i = 1; i < kNumBlocks; ++i) shadow_queue_.push_back(i);
  }

  void run(int num_ops) {
    for (op_idx_ = 0; op_idx_ < num_ops; ++op_idx_) {
      const int op = uniform(0, 99);
      if (tables_.empty() || op < 12) {
        new_table();
      } else if (op < 45) {
        append(pick(tables_.size()));
      } else if (op < 55) {
        fork(pick(tables_.size()));
      } else if (op < 70) {
        release(pick(tables_.size()));
      } else if (op < 78) {
        raw_allocate();
      } else if (op < 86) {
        if (!raw_.empty()) raw_free(pick(raw_.size()));
      } else if (op < 92) {
        if (!raw_.empty()) raw_add_ref(pick(raw_.size()));
      } else {
        probe_can_allocate();
      }
      verify();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  // Every owner lets go; afterwards nothing may be leaked.
  void release_everything() {
    while (!tables_.empty()) {
      release(tables_.size() - 1);
      verify();
    }
    while (!raw_.empty()) {
      raw_free(raw_.size() - 1);
      verify();
    }
  }

  const BlockPool& pool() const { return pool_; }
  int num_failed_appends = 0;
  int num_failed_allocates = 0;
  int num_forks = 0;
  int num_shared_seen = 0;  // operations after which some block had ref count > 1

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  size_t pick(size_t n) { return static_cast<size_t>(uniform(0, static_cast<int>(n) - 1)); }

  // ---- shadow model ---------------------------------------------------------------------------

  std::vector<int32_t> shadow_allocate(int32_t n) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < n; ++i) {
      const int32_t b = shadow_queue_.front();
      shadow_queue_.pop_front();
      shadow_refs_[static_cast<size_t>(b)] = 1;
      out.push_back(b);
    }
    return out;
  }

  void shadow_free(std::span<const BlockId> blocks) {
    for (const BlockId b : blocks) {
      if (b == kNullBlock) continue;
      if (--shadow_refs_[static_cast<size_t>(b.value)] == 0) shadow_queue_.push_back(b.value);
    }
  }

  // ---- operations -----------------------------------------------------------------------------

  void new_table() {
    tables_.emplace_back(kBlockSizes[pick(kBlockSizes.size())]);
    append(tables_.size() - 1);
  }

  void append(size_t t) {
    BlockTable& table = tables_[t];
    const int32_t bs = table.block_size();
    // Mostly small steps (decode, short chunks); sometimes a long prompt that may not fit.
    const int32_t n = uniform(0, 9) == 0 ? uniform(0, 40 * bs) : uniform(0, 2 * bs + 1);
    const int64_t total = static_cast<int64_t>(table.num_tokens()) + n;
    const auto needed =
        static_cast<int32_t>((total + bs - 1) / bs - static_cast<int64_t>(table.blocks().size()));
    ASSERT_EQ(table.num_blocks_needed(n), needed);

    const PoolSnapshot before(pool_);
    const std::vector<int32_t> blocks_before = values(table.blocks());
    const int32_t tokens_before = table.num_tokens();
    const bool ok = table.append_slots(pool_, n);
    if (needed > static_cast<int32_t>(shadow_queue_.size())) {
      ASSERT_FALSE(ok) << "op " << op_idx_ << ": append of " << n << " needs " << needed;
      ASSERT_EQ(PoolSnapshot(pool_), before) << "failed append changed the pool";
      ASSERT_EQ(values(table.blocks()), blocks_before) << "failed append changed the table";
      ASSERT_EQ(table.num_tokens(), tokens_before);
      ++num_failed_appends;
      return;
    }
    ASSERT_TRUE(ok) << "op " << op_idx_ << ": append of " << n << " needs " << needed;
    std::vector<int32_t> expected = blocks_before;
    for (const int32_t b : shadow_allocate(std::max(needed, 0))) expected.push_back(b);
    ASSERT_EQ(values(table.blocks()), expected) << "new blocks come from the queue front";
    ASSERT_EQ(table.num_tokens(), tokens_before + n);
  }

  void fork(size_t t) {
    BlockTable child = tables_[t];  // shares every block of the parent
    pool_.add_ref(child.blocks());
    for (const BlockId b : child.blocks()) ++shadow_refs_[static_cast<size_t>(b.value)];
    tables_.push_back(std::move(child));
    ++num_forks;
  }

  void release(size_t t) {
    const std::vector<BlockId> blocks(tables_[t].blocks().begin(), tables_[t].blocks().end());
    tables_[t].release(pool_);
    shadow_free(blocks);
    ASSERT_EQ(tables_[t].num_tokens(), 0);
    ASSERT_TRUE(tables_[t].blocks().empty());
    tables_[t] = std::move(tables_.back());
    tables_.pop_back();
  }

  void raw_allocate() {
    const int32_t n = uniform(0, 6);
    const PoolSnapshot before(pool_);
    std::optional<std::vector<BlockId>> got = pool_.allocate(n);
    if (n > static_cast<int32_t>(shadow_queue_.size())) {
      ASSERT_FALSE(got.has_value());
      ASSERT_EQ(PoolSnapshot(pool_), before) << "failed allocation changed the pool";
      ++num_failed_allocates;
      return;
    }
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(values(*got), shadow_allocate(n));
    raw_.push_back(std::move(*got));
  }

  void raw_free(size_t r) {
    std::vector<BlockId> blocks = std::move(raw_[r]);
    raw_[r] = std::move(raw_.back());
    raw_.pop_back();
    std::shuffle(blocks.begin(), blocks.end(), rng_);      // the given order is the queue order
    if (uniform(0, 3) == 0) blocks.push_back(kNullBlock);  // ignored
    pool_.free(blocks);
    shadow_free(blocks);
  }

  void raw_add_ref(size_t r) {
    if (raw_[r].empty()) return;
    // A new holder of a random subset (duplicates allowed) of the group's blocks.
    std::vector<BlockId> extra;
    const int k = uniform(1, 4);
    for (int i = 0; i < k; ++i) extra.push_back(raw_[r][pick(raw_[r].size())]);
    pool_.add_ref(extra);
    for (const BlockId b : extra) ++shadow_refs_[static_cast<size_t>(b.value)];
    raw_.push_back(std::move(extra));
  }

  void probe_can_allocate() {
    const PoolSnapshot before(pool_);
    const int32_t n = uniform(-1, kNumBlocks);
    ASSERT_EQ(pool_.can_allocate(n), n >= 0 && n <= static_cast<int32_t>(shadow_queue_.size()));
    ASSERT_EQ(PoolSnapshot(pool_), before);
  }

  // ---- checks after every operation -------------------------------------------------------------

  void verify() {
    pool_.check_invariants();
    ASSERT_EQ(pool_.num_free_blocks(), static_cast<int32_t>(shadow_queue_.size()))
        << "op " << op_idx_;
    ASSERT_EQ(pool_.num_used_blocks(), kNumBlocks - 1 - pool_.num_free_blocks());
    const std::vector<int32_t> queue = values(pool_.free_queue());
    ASSERT_TRUE(std::equal(queue.begin(), queue.end(), shadow_queue_.begin(), shadow_queue_.end()))
        << "op " << op_idx_ << ": free queue order differs from the shadow model";

    // Ref counts recomputed from the owners, independently of the shadow bookkeeping.
    std::vector<int32_t> owned(kNumBlocks, 0);
    for (const BlockTable& table : tables_) {
      const int32_t bs = table.block_size();
      ASSERT_EQ(static_cast<int32_t>(table.blocks().size()), (table.num_tokens() + bs - 1) / bs);
      for (const BlockId b : table.blocks()) ++owned[static_cast<size_t>(b.value)];
    }
    for (const auto& group : raw_) {
      for (const BlockId b : group) ++owned[static_cast<size_t>(b.value)];
    }
    bool shared = false;
    for (int32_t i = 0; i < kNumBlocks; ++i) {
      const int32_t rc = pool_.ref_count(BlockId{i});
      ASSERT_EQ(rc, shadow_refs_[static_cast<size_t>(i)]) << "op " << op_idx_ << " block " << i;
      ASSERT_EQ(rc, owned[static_cast<size_t>(i)]) << "op " << op_idx_ << " block " << i;
      shared = shared || rc > 1;
    }
    if (shared) ++num_shared_seen;
  }

  std::mt19937_64 rng_;
  BlockPool pool_;
  std::vector<int32_t> shadow_refs_;
  std::deque<int32_t> shadow_queue_;
  std::vector<BlockTable> tables_;
  std::vector<std::vector<BlockId>> raw_;  // blocks held directly, one reference per entry
  int op_idx_ = 0;
};

class BlockPoolRandomTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(BlockPoolRandomTest, MixedOperationsMatchTheShadowModelAndLeakNothing) {
  RandomPoolSim sim(GetParam());
  sim.run(kNumOps);
  ASSERT_FALSE(HasFatalFailure());
  sim.release_everything();
  ASSERT_FALSE(HasFatalFailure());

  EXPECT_EQ(sim.pool().num_free_blocks(), sim.pool().num_blocks() - 1) << "leaked blocks";
  EXPECT_EQ(sim.pool().num_used_blocks(), 0);
  for (int32_t i = 0; i < sim.pool().num_blocks(); ++i) {
    EXPECT_EQ(sim.pool().ref_count(BlockId{i}), 0) << "block " << i;
  }
  // The run exercised the interesting paths, not just the easy ones.
  EXPECT_GT(sim.num_failed_appends, 0);
  EXPECT_GT(sim.num_failed_allocates, 0);
  EXPECT_GT(sim.num_forks, 50);
  EXPECT_GT(sim.num_shared_seen, 100);
}

INSTANTIATE_TEST_SUITE_P(Seeds, BlockPoolRandomTest, ::testing::Values(1u, 2u, 3u, 20240601u),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return "Seed" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace strata::kv

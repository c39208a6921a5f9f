// A seeded randomized test of the prefix cache through KvCacheManager: thousands of mixed
// admit (lookup + allocate) / chunked prefill / decode / fork / free operations over prompts that
// share prefixes, under two tenants, with the pool small enough that cached blocks are evicted
// constantly. A shadow of every block's content (the tokens and salt its K/V were computed from)
// checks the one property that matters: every hit block holds exactly the query's prefix. Also
// checked after every operation: the pool's invariants, ref counts recomputed from the tables,
// no write into a shared or cached block, and that a failed allocation changes nothing. The 8-bit
// weakened hash runs the same operations: collisions everywhere, still zero wrong hits. With a
// sliding window, blocks before each step's window are given back first, and every block a step's
// queries read must still be the sequence's own. With a residual pool (INT4, R = 1, 2 or 3, small
// enough that it runs out), every position a step reads at full precision must have a residual
// block holding the sequence's own K/V -- with R > 1 that includes the cached residual copies a
// prefix hit took, 8-bit hashes too -- no write lands in a shared residual block, a failed
// allocation changes neither pool, and zero blocks leak from either.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::held;
using test_util::PoolSnapshot;

constexpr int32_t kBs = 4;
constexpr int32_t kNumBlocks = 40;
constexpr int kNumOps = 5000;
constexpr int32_t kNumResidualBlocks = 14;

struct SimSeq {
  BlockTable table{kBs};
  std::vector<int32_t> tokens;
  int32_t num_computed = 0;
  BlockExtraKeys extra;
};

// What a block's K/V were computed from.
struct Content {
  std::string salt;
  std::vector<int32_t> prefix;  // every token up to this block's last written position
  bool operator==(const Content&) const = default;
};

class RandomCacheSim {
 public:
  // Group 0: full attention or a window; a newest-blocks group of R = residual (INT4).
  static KvCacheConfig config(int32_t hash_bits, int32_t window, int32_t residual) {
    KvCacheConfig c{.block_size = kBs, .hash_bits = hash_bits, .groups = {}};
    c.groups.push_back({window > 0 ? KvGroupSpec::windowed(window, {}) : KvGroupSpec{}, kNumBlocks});
    if (residual > 0) c.groups.push_back({KvGroupSpec::newest(residual, {}), kNumResidualBlocks});
    return c;
  }

  RandomCacheSim(uint64_t seed, int32_t hash_bits, int32_t window, int32_t residual)
      : rng_(seed),
        window_(window),
        residual_(residual),
        m_(config(hash_bits, window, residual)),
        content_(kNumBlocks),
        res_content_(kNumResidualBlocks) {
    for (auto& doc : docs_) {
      for (int i = 0; i < 48; ++i) doc.push_back(uniform(0, 5));
    }
  }

  void run(int num_ops) {
    for (op_ = 0; op_ < num_ops; ++op_) {
      const int op = uniform(0, 99);
      if (seqs_.empty() || (op < 25 && seqs_.size() < 10)) {
        admit();
      } else if (op < 60) {
        advance(pick(seqs_.size()));
      } else if (op < 70) {
        fork(pick(seqs_.size()));
      } else if (op < 90) {
        free_seq(pick(seqs_.size()));
      } else {
        probe();
      }
      verify();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  void free_all() {
    while (!seqs_.empty()) {
      free_seq(seqs_.size() - 1);
      verify();
    }
  }

  const KvCacheManager& manager() const { return m_; }
  // The newest-blocks group's pool (INT4), or an empty one without that group.
  const BlockPool& residual_pool() const {
    static const BlockPool kNone(1);
    return m_.num_groups() > 1 ? m_.pool(1) : kNone;
  }
  int64_t num_hit_blocks = 0;
  int64_t num_residual_hit_blocks = 0;  // R > 1: cached residual copies hits took
  int num_failed = 0;
  int num_copies = 0;
  int num_residual_copies = 0;

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  size_t pick(size_t n) { return static_cast<size_t>(uniform(0, static_cast<int>(n) - 1)); }

  void admit() {
    SimSeq s;
    const auto& doc = docs_[pick(docs_.size())];
    s.tokens.assign(doc.begin(), doc.begin() + uniform(0, static_cast<int>(doc.size())));
    const int tail = uniform(1, 12);
    for (int i = 0; i < tail; ++i) s.tokens.push_back(uniform(0, 5));
    s.extra.cache_salt = uniform(0, 3) == 0 ? "tenant-b" : "";
    const PrefixHit hit = m_.find_cached_prefix(s.tokens, s.extra);
    for (size_t i = 0; i < hit.blocks().size(); ++i) {
      if (hit.blocks()[i] == kNullBlock) continue;  // before the window: not taken
      const Content expected{
          s.extra.cache_salt,
          {s.tokens.begin(), s.tokens.begin() + static_cast<int64_t>((i + 1) * kBs)}};
      ASSERT_EQ(content_[static_cast<size_t>(hit.blocks()[i].value)], expected)
          << "op " << op_ << ": a hit served a block computed from another prefix";
    }
    const int32_t remaining = static_cast<int32_t>(s.tokens.size()) - hit.num_tokens;
    const int32_t chunk = uniform(1, remaining);
    if (!try_allocate(s, chunk, &hit)) return;
    num_hit_blocks += static_cast<int64_t>(hit.blocks().size());
    num_residual_hit_blocks += static_cast<int64_t>(held(hit.blocks(1)).size());
    s.num_computed = hit.num_tokens;
    compute(s, chunk);
    seqs_.push_back(std::move(s));
  }

  // Next prefill chunk, or one decode token once the prompt is done.
  void advance(size_t i) {
    SimSeq& s = seqs_[i];
    if (s.num_computed == static_cast<int32_t>(s.tokens.size())) s.tokens.push_back(uniform(0, 5));
    const int32_t n = uniform(1, static_cast<int32_t>(s.tokens.size()) - s.num_computed);
    m_.free_unneeded_blocks(s.table, s.table.num_tokens());
    if (try_allocate(s, n, nullptr)) compute(s, n);
  }

  bool try_allocate(SimSeq& s, int32_t n, const PrefixHit* hit) {
    const PoolSnapshot before(m_.pool());
    const PoolSnapshot res_before(residual_pool());
    const bool can = m_.can_allocate(s.table, n, hit);
    EXPECT_EQ(PoolSnapshot(m_.pool()), before) << "can_allocate changed the pool";
    EXPECT_EQ(PoolSnapshot(residual_pool()), res_before) << "can_allocate changed the pool";
    const std::vector<BlockId> blocks_before(s.table.blocks().begin(), s.table.blocks().end());
    const std::vector<BlockId> res_blocks_before(held(s.table.blocks(1)).begin(),
                                                 held(s.table.blocks(1)).end());
    const bool ok = m_.allocate_slots(s.table, n, hit);
    EXPECT_EQ(ok, can) << "op " << op_;
    if (!ok) {
      EXPECT_EQ(PoolSnapshot(m_.pool()), before) << "op " << op_ << ": failed allocation";
      EXPECT_EQ(PoolSnapshot(residual_pool()), res_before)
          << "op " << op_ << ": failed allocation changed the residual pool";
      EXPECT_EQ(std::vector<BlockId>(s.table.blocks().begin(), s.table.blocks().end()),
                blocks_before);
      EXPECT_EQ(
          std::vector<BlockId>(held(s.table.blocks(1)).begin(), held(s.table.blocks(1)).end()),
          res_blocks_before);
      ++num_failed;
    }
    return ok;
  }

  // The residual side of a step computing [num_computed, + n): every position its queries read
  // at full precision has a residual block holding this sequence's own K/V; the new positions
  // land in unshared residual blocks.
  void compute_residual(SimSeq& s, int32_t n) {
    for (const BlockCopy& c : m_.take_pending_copies(1)) {
      res_content_[static_cast<size_t>(c.dst.value)] =
          res_content_[static_cast<size_t>(c.src.value)];
      ++num_residual_copies;
    }
    const int32_t first_block = std::max(0, s.num_computed / kBs - residual_ + 1);
    for (int32_t pos = first_block * kBs; pos < s.num_computed + n; ++pos) {
      const int32_t idx = pos / kBs - s.table.num_skipped_blocks(1);
      ASSERT_TRUE(idx >= 0 && idx < static_cast<int32_t>(held(s.table.blocks(1)).size()))
          << "op " << op_ << ": position " << pos << " has no residual block";
      const BlockId b = held(s.table.blocks(1))[static_cast<size_t>(idx)];
      Content& c = res_content_[static_cast<size_t>(b.value)];
      if (pos < s.num_computed) {
        ASSERT_TRUE(c.salt == s.extra.cache_salt && static_cast<int32_t>(c.prefix.size()) > pos &&
                    std::equal(c.prefix.begin(), c.prefix.begin() + pos + 1, s.tokens.begin()))
            << "op " << op_ << ": position " << pos << " reads another sequence's residual";
      } else {
        ASSERT_EQ(m_.pool(1).ref_count(b), 1)
            << "op " << op_ << ": write into a shared residual block";
        c.salt = s.extra.cache_salt;
        c.prefix.assign(s.tokens.begin(), s.tokens.begin() + pos + 1);
      }
    }
  }

  // "Runs" the step: copy-on-write copies, then checks that every earlier position the step's
  // queries attend to holds this sequence's own K/V, then writes positions [num_computed, + n).
  void compute(SimSeq& s, int32_t n) {
    for (const BlockCopy& c : m_.take_pending_copies()) {
      content_[static_cast<size_t>(c.dst.value)] = content_[static_cast<size_t>(c.src.value)];
      ++num_copies;
    }
    if (residual_ > 0) compute_residual(s, n);
    const int32_t first_read = window_ > 0 ? std::max(0, s.num_computed - window_ + 1) : 0;
    for (int32_t pos = first_read; pos < s.num_computed; ++pos) {
      const BlockId b = s.table.blocks()[static_cast<size_t>(pos / kBs)];
      ASSERT_NE(b, kNullBlock) << "op " << op_ << ": a block inside the window was given back";
      const Content& c = content_[static_cast<size_t>(b.value)];
      ASSERT_TRUE(c.salt == s.extra.cache_salt && static_cast<int32_t>(c.prefix.size()) > pos &&
                  std::equal(c.prefix.begin(), c.prefix.begin() + pos + 1, s.tokens.begin()))
          << "op " << op_ << ": position " << pos << " reads another sequence's K/V";
    }
    for (int32_t pos = s.num_computed; pos < s.num_computed + n; ++pos) {
      const BlockId b = s.table.blocks()[static_cast<size_t>(pos / kBs)];
      ASSERT_EQ(m_.pool().ref_count(b), 1) << "op " << op_ << ": write into a shared block";
      ASSERT_FALSE(m_.pool().is_cached(b)) << "op " << op_ << ": write into a cached block";
      Content& c = content_[static_cast<size_t>(b.value)];
      c.salt = s.extra.cache_salt;
      c.prefix.assign(s.tokens.begin(), s.tokens.begin() + pos + 1);
    }
    s.num_computed += n;
    m_.cache_full_blocks(s.table, s.tokens, s.num_computed, s.extra);
    // The engine gives back what no later query reads at once; allocate_slots must cope without.
    if (uniform(0, 1) == 0) m_.free_unneeded_blocks(s.table, s.num_computed);
  }

  void fork(size_t i) {
    SimSeq child;
    child.tokens.assign(seqs_[i].tokens.begin(), seqs_[i].tokens.begin() + seqs_[i].num_computed);
    child.num_computed = seqs_[i].num_computed;
    child.extra = seqs_[i].extra;
    m_.fork(seqs_[i].table, child.table);
    // The child diverges: its own next token.
    child.tokens.push_back(uniform(0, 5));
    seqs_.push_back(std::move(child));
  }

  void free_seq(size_t i) {
    m_.free(seqs_[i].table);
    seqs_[i] = std::move(seqs_.back());
    seqs_.pop_back();
  }

  void probe() {
    SimSeq s;
    s.tokens = docs_[pick(docs_.size())];
    const PoolSnapshot before(m_.pool());
    const PrefixHit hit = m_.find_cached_prefix(s.tokens, s.extra);
    (void)m_.num_blocks_to_allocate(s.table, static_cast<int32_t>(s.tokens.size()) - hit.num_tokens,
                                    &hit);
    ASSERT_EQ(PoolSnapshot(m_.pool()), before) << "lookup or admission check changed the pool";
  }

  void verify() {
    m_.pool().check_invariants();
    std::vector<const BlockTable*> tables;
    for (const SimSeq& s : seqs_) tables.push_back(&s.table);
    m_.check_invariants(tables);
    std::vector<int32_t> owned(kNumBlocks, 0);
    for (const SimSeq& s : seqs_) {
      ASSERT_EQ(s.table.num_tokens(), s.num_computed);
      for (const BlockId b : s.table.blocks()) owned[static_cast<size_t>(b.value)] += b != kNullBlock;
    }
    for (int32_t i = 0; i < kNumBlocks; ++i) {
      ASSERT_EQ(m_.pool().ref_count(BlockId{i}), owned[static_cast<size_t>(i)])
          << "op " << op_ << " block " << i;
    }
  }

  std::mt19937_64 rng_;
  int32_t window_;
  int32_t residual_;
  KvCacheManager m_;
  std::vector<Content> content_;
  std::vector<Content> res_content_;
  std::array<std::vector<int32_t>, 4> docs_;
  std::vector<SimSeq> seqs_;
  int op_ = 0;
};

struct Param {
  uint64_t seed;
  int32_t hash_bits;
  int32_t window = 0;
  int32_t residual = 0;  // R of a residual pool, or 0
};

class KvCacheManagerRandomTest : public ::testing::TestWithParam<Param> {};

TEST_P(KvCacheManagerRandomTest, MixedOperationsNeverServeWrongKvAndLeakNothing) {
  RandomCacheSim sim(GetParam().seed, GetParam().hash_bits, GetParam().window, GetParam().residual);
  sim.run(kNumOps);
  ASSERT_FALSE(HasFatalFailure());
  sim.free_all();
  ASSERT_FALSE(HasFatalFailure());
  const BlockPool& pool = sim.manager().pool();
  EXPECT_EQ(pool.num_used_blocks(), 0) << "leaked blocks";
  EXPECT_EQ(pool.num_free_blocks(), kNumBlocks - 1);
  EXPECT_EQ(sim.residual_pool().num_used_blocks(), 0) << "leaked residual blocks";
  // The run exercised hits, evictions, copy-on-write and failed admissions.
  EXPECT_GT(sim.num_hit_blocks, 200);
  EXPECT_GT(sim.manager().stats().num_evictions, 100);
  if (GetParam().residual > 1) {
    // compute_residual checked that each copy held this sequence's own positions.
    EXPECT_GT(sim.num_residual_hit_blocks, 50) << "R > 1: hits take their last blocks' copies";
  }
  if (GetParam().residual > 0) {
    EXPECT_GT(sim.num_residual_copies, 10);
    EXPECT_EQ(sim.manager().pool(1).num_free_blocks(), kNumResidualBlocks - 1);
  }
  EXPECT_GT(sim.num_copies, 10);
  // A window alone rarely fills the pool: each step gives its past back before the next one.
  EXPECT_GT(sim.num_failed, GetParam().window > 0 && GetParam().residual == 0 ? 0 : 5);
}

INSTANTIATE_TEST_SUITE_P(Seeds, KvCacheManagerRandomTest,
                         ::testing::Values(Param{1, 256}, Param{2, 256}, Param{3, 8}, Param{4, 8},
                                           Param{20240601, 1}, Param{5, 256, 6}, Param{6, 8, 9},
                                           Param{7, 256, 0, 1}, Param{8, 8, 0, 2},
                                           Param{9, 256, 6, 1}, Param{10, 256, 0, 3},
                                           Param{11, 256, 6, 2}, Param{12, 8, 9, 3}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return "Seed" + std::to_string(info.param.seed) + "Bits" +
                                  std::to_string(info.param.hash_bits) + "Window" +
                                  std::to_string(info.param.window) + "Residual" +
                                  std::to_string(info.param.residual);
                         });

}  // namespace
}  // namespace strata::kv

// Token-level eviction (kv_eviction.h, KvCacheManager::compact_tokens / compact_head_tokens,
// copy_slots): H2O and SnapKV take exactly the tokens their definitions name on constructed
// scores (hand-computed; SnapKV per head, two heads keeping their own), SnapKV's pooling (max and
// avg), compaction's moves, the table and pool after a compaction, the bytes copy_slots moves
// (every layer and head, or one head's, an INT8 layer's scales), and seeded randomized runs of
// grow / evict / fork / free that follow every slot's position (per head) through the pool's
// bytes, with invariants after every operation and no block leaked.

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "kv/block_copy.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_eviction.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::values;
using V = std::vector<int32_t>;
using Moves = std::vector<std::pair<int32_t, int32_t>>;

constexpr int32_t kBs = 4;

ResolvedKvEviction h2o(int32_t budget, int32_t sink, int32_t window) {
  return {KvEvictionPolicy::kH2O, budget, sink, window};
}

V iota(int32_t n) {
  V v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// ---- which tokens each policy takes ------------------------------------------------------

TEST(ChooseEvictedTokensTest, H2OTakesTheLowestMassOutsideTheSinksAndTheWindow) {
  // Ten slots holding positions 0..9; sink 1, window 3 (positions 7, 8, 9), budget 6: four of
  // positions 1..6 go, the lowest mass first.
  const std::vector<float> mass = {9, 1, 8, 2, 7, 0.5f, 3, 0, 0, 0};
  EXPECT_EQ(choose_evicted_tokens(h2o(6, 1, 3), iota(10), mass, {}, 10), (V{1, 3, 5, 6}));
  // Within the budget nothing goes.
  EXPECT_EQ(choose_evicted_tokens(h2o(10, 1, 3), iota(10), mass, {}, 10), V{});
  // Ties go to the lower position first; slots are returned ascending whatever their order.
  const std::vector<float> flat(10, 1.0f);
  EXPECT_EQ(choose_evicted_tokens(h2o(7, 0, 0), V{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, flat, {}, 10),
            (V{7, 8, 9}))
      << "positions 0, 1, 2 sit in slots 9, 8, 7";
  // A locked slot (its block shared with a fork) stays; the next lowest (7, position 4) goes
  // instead.
  const std::vector<uint8_t> locked = {0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(choose_evicted_tokens(h2o(6, 1, 3), iota(10), mass, locked, 10), (V{3, 4, 5, 6}));
  // When the protected slots alone exceed the budget, only the candidates go.
  EXPECT_EQ(choose_evicted_tokens(h2o(2, 1, 1), iota(4), std::vector<float>(4, 0.0f), {}, 4),
            (V{1, 2}));
}

TEST(ChooseEvictedTokensTest, SnapKvProtectsThePromptsObservationWindow) {
  // A 12-token prompt, window 4 (positions 8..11), budget 6: of positions 0..7 the two best
  // pooled scores stay. The window gave position 2 most, position 0 a little.
  const ResolvedKvEviction snap{KvEvictionPolicy::kSnapKv, 6, 0, 4};
  const std::vector<float> window_mass = {1, 0, 10, 0, 0, 0, 0, 0};
  std::vector<float> scores = pool_scores(window_mass, 5);
  // Kernel 5, zero padding: 2.2, 2.2, 2.2, 2, 2, 0, 0, 0.
  EXPECT_EQ(scores, (std::vector<float>{2.2f, 2.2f, 2.2f, 2.0f, 2.0f, 0.0f, 0.0f, 0.0f}));
  scores.resize(12, 0.0f);  // the window: protected whatever its score
  // 5, 6, 7, then 3, 4, then the lowest position of the 2.2s: position 2 stays with its
  // neighbour 1.
  EXPECT_EQ(choose_evicted_tokens(snap, iota(12), scores, {}, 12), (V{0, 3, 4, 5, 6, 7}));
  // Unpooled, the zeros go first and position 0 stays instead of 1.
  std::vector<float> raw = window_mass;
  raw.resize(12, 0.0f);
  EXPECT_EQ(choose_evicted_tokens(snap, iota(12), raw, {}, 12), (V{1, 3, 4, 5, 6, 7}));
}

// SnapKV per (layer, KV head): head 0's window attends to position 1, head 1's to position 6;
// each head keeps its own favourite (and, pooled, its neighbours), as many tokens as the other.
TEST(ChooseEvictedTokensTest, SnapKvPerHeadKeepsEachHeadsOwnTokens) {
  const ResolvedKvEviction snap{KvEvictionPolicy::kSnapKv, 6, 0, 4};
  // A 12-token prompt, window 4 (positions 8..11): 2 of positions 0..7 stay per head.
  const std::vector<std::vector<float>> scores = {
      {0, 9, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},  // head 0: position 1, then 6
      {0, 1, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0},  // head 1: position 6, then 7
  };
  const std::vector<std::vector<int32_t>> slots =
      choose_evicted_tokens_per_head(snap, iota(12), scores, {}, 12);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0], (V{0, 2, 3, 4, 5, 7})) << "head 0 keeps 1 and 6";
  EXPECT_EQ(slots[1], (V{0, 1, 2, 3, 4, 5})) << "head 1 keeps 6 and 7";
  // One shared selection would have kept the same two for both.
  EXPECT_NE(slots[0], slots[1]);
  // A locked slot (a fork's block) stays in every head.
  const std::vector<uint8_t> locked = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<std::vector<int32_t>> held =
      choose_evicted_tokens_per_head(snap, iota(12), scores, locked, 12);
  EXPECT_EQ(held[0], (V{0, 2, 3, 5, 6, 7}));
  EXPECT_EQ(held[1], (V{0, 1, 2, 3, 5, 7}));
  // Within the budget nothing goes, in any head.
  EXPECT_TRUE(
      choose_evicted_tokens_per_head(
          snap, iota(6), std::vector<std::vector<float>>(2, std::vector<float>(6, 0.0f)), {}, 6)
          .empty());
}

TEST(PoolScoresTest, MaxOverTheKernel) {
  const std::vector<float> s = {5, 0, 0, 0, 10, 1};
  EXPECT_EQ(pool_scores(s, 3, KvEvictionPooling::kMax), (std::vector<float>{5, 5, 0, 10, 10, 10}));
  EXPECT_EQ(pool_scores(s, 7, KvEvictionPooling::kMax),
            (std::vector<float>{5, 10, 10, 10, 10, 10}));
  EXPECT_EQ(pool_scores(s, 1, KvEvictionPooling::kMax), s);
}

TEST(PoolScoresTest, MeanOverTheKernelWithZeroPadding) {
  const std::vector<float> s = {5, 0, 0, 0, 10};
  const std::vector<float> p = pool_scores(s, 3);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_FLOAT_EQ(p[0], 5.0f / 3);
  EXPECT_FLOAT_EQ(p[1], 5.0f / 3);
  EXPECT_FLOAT_EQ(p[2], 0.0f);
  EXPECT_FLOAT_EQ(p[3], 10.0f / 3);
  EXPECT_FLOAT_EQ(p[4], 10.0f / 3);
  EXPECT_EQ(pool_scores(s, 1), s);
}

TEST(ChooseEvictedTokensTest, ResolvedDefaults) {
  const Result<ResolvedKvEviction> h =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kH2O, 64}, {});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, h2o(64, 0, 32)) << "H2O's recent half";
  const Result<ResolvedKvEviction> s =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kSnapKv, 256}, {});
  ASSERT_TRUE(s.ok());
  ResolvedKvEviction want{KvEvictionPolicy::kSnapKv, 256, 0, 32};
  want.pool_kernel = 7;  // the paper's: per head, max pooling over 7
  EXPECT_EQ(*s, want);
  EXPECT_TRUE(s->per_head());
  // A request's selection, pooling and kernel; the defaults' only where they name SnapKV too.
  KvEvictionParams shared{KvEvictionPolicy::kSnapKv, 256};
  shared.selection = KvEvictionSelection::kShared;
  shared.pooling = KvEvictionPooling::kAvg;
  shared.pool_kernel = 5;
  const Result<ResolvedKvEviction> sh = resolve_kv_eviction(shared, {});
  ASSERT_TRUE(sh.ok());
  EXPECT_FALSE(sh->per_head());
  EXPECT_EQ(sh->pooling, KvEvictionPooling::kAvg);
  EXPECT_EQ(sh->pool_kernel, 5);
  const Result<ResolvedKvEviction> from_defaults =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kSnapKv, 64}, shared);
  ASSERT_TRUE(from_defaults.ok());
  EXPECT_EQ(from_defaults->pool_kernel, 5);
  EXPECT_FALSE(from_defaults->per_head());
  KvEvictionParams h2o_shared = shared;
  h2o_shared.policy = KvEvictionPolicy::kH2O;
  EXPECT_FALSE(resolve_kv_eviction(h2o_shared, {}).ok()) << "SnapKV's fields on H2O";
  const Result<ResolvedKvEviction> h2o_default =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kH2O, 64}, shared);
  ASSERT_TRUE(h2o_default.ok()) << "a SnapKV default's fields do not reach another policy";
  EXPECT_FALSE(h2o_default->per_head());
  // A selection point inside the prompt (the continuation measure): the request's own only.
  KvEvictionParams at{KvEvictionPolicy::kSnapKv, 64};
  at.selection_at_tokens = 300;
  EXPECT_EQ(resolve_kv_eviction(at, {})->selection_at_tokens, 300);
  EXPECT_EQ(resolve_kv_eviction(std::nullopt, at)->selection_at_tokens, 0) << "not a default";
  at.policy = KvEvictionPolicy::kH2O;
  EXPECT_FALSE(validate_kv_eviction(at).ok()) << "SnapKV's field on H2O";
  at.policy = KvEvictionPolicy::kSnapKv;
  at.selection_at_tokens = -1;
  EXPECT_FALSE(validate_kv_eviction(at).ok());
  KvEvictionParams even{KvEvictionPolicy::kSnapKv, 64};
  even.pool_kernel = 4;
  EXPECT_FALSE(validate_kv_eviction(even).ok());
  EXPECT_FALSE(resolve_kv_eviction(even, {}).ok());
  const Result<ResolvedKvEviction> small =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kSnapKv, 40}, {});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->window_tokens, 20) << "at most half the budget";
  EXPECT_TRUE(is_token_level(KvEvictionPolicy::kH2O));
  EXPECT_FALSE(is_token_level(KvEvictionPolicy::kPagedEviction));
  // H2O holds its budget after an eviction, + a block during a step; SnapKV the whole prompt,
  // then the budget + what it generates.
  EXPECT_EQ(max_held_slots(h2o(64, 0, 32), kBs, 1000, 100), 68);
  EXPECT_EQ(max_held_slots(*s, kBs, 1000, 100), 1000);
  EXPECT_EQ(max_held_slots(*s, kBs, 300, 100), 356);
  EXPECT_EQ(max_held_slots(*s, kBs, 100, 10), 110) << "never more than prompt + max_tokens";
}

// ---- compaction --------------------------------------------------------------------------

TEST(CompactionMovesTest, HolesBelowTheNewLengthTakeTheLiveSlotsAboveItInOrder) {
  // 14 slots losing 1, 5, 6, 12: K = 10; holes 1, 5, 6 take the live 10, 11, 13.
  EXPECT_EQ(compaction_moves(14, V{1, 5, 6, 12}), (Moves{{10, 1}, {11, 5}, {13, 6}}));
  // Removing the tail moves nothing.
  EXPECT_EQ(compaction_moves(8, V{6, 7}), Moves{});
  EXPECT_EQ(compaction_moves(8, V{}), Moves{});
  // Removing the head: the newest fill it.
  EXPECT_EQ(compaction_moves(6, V{0, 1}), (Moves{{4, 0}, {5, 1}}));
  std::vector<int32_t> positions = iota(14);
  compact_slot_values(positions, V{1, 5, 6, 12});
  EXPECT_EQ(positions, (V{0, 10, 2, 3, 4, 11, 13, 7, 8, 9}));
}

class CompactTokensTest : public ::testing::Test {
 protected:
  CompactTokensTest() : m_(KvCacheConfig{.block_size = kBs, .groups = {{KvGroupSpec{}, 17}}}) {}
  KvCacheManager m_;
};

// A pool of 2 layers x 2 KV heads of 4-channel rows (17 blocks) read through table t, where
// every byte of the row of (layer l, part p: K 0 / V 1, head h) at position pos -- and of its
// INT8 scale -- is pos * 16 + l * 8 + p * 4 + h, truncated to a byte: after a compaction, what a
// slot holds names the position it came from.
class MarkedPool {
 public:
  MarkedPool(DType d, const BlockTable& t)
      : layout_(KvSpec{.num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .dtype = d}, kBs),
        kv_(layout_, 17),
        t_(t),
        row_(4 * dtype_bits(d) / 8),
        scale_(kv_token_scale_bytes(d)) {}

  const KvLayout& layout() const { return layout_; }
  HostKvBuffer& kv() { return kv_; }

  // Slots 0 .. n - 1 hold positions 0 .. n - 1.
  void mark_slots(int32_t n) {
    for (int32_t s = 0; s < n; ++s) {
      for (int l = 0; l < 2; ++l)
        for (int p = 0; p < 2; ++p)
          for (int h = 0; h < 2; ++h) {
            std::memset(locate(s, l, p, h, false), static_cast<int>(mark(s, l, p, h)), row_);
            if (scale_ > 0)
              std::memset(locate(s, l, p, h, true), static_cast<int>(mark(s, l, p, h)), scale_);
          }
    }
  }
  // Whether slot's row (and scale) of (l, p, h) holds position pos's bytes.
  ::testing::AssertionResult holds(int32_t slot, int l, int p, int h, int32_t pos) {
    const std::byte want = mark(pos, l, p, h);
    for (const bool scales : {false, true}) {
      const std::byte* got = locate(slot, l, p, h, scales);
      for (int64_t b = 0; b < (scales ? scale_ : row_); ++b) {
        if (got[b] != want) {
          return ::testing::AssertionFailure()
                 << "slot " << slot << " (layer " << l << ", part " << p << ", head " << h
                 << (scales ? ") scale" : ") row") << " does not hold position " << pos;
        }
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  static std::byte mark(int32_t pos, int l, int p, int h) {
    return static_cast<std::byte>((pos * 16 + l * 8 + p * 4 + h) & 0xFF);
  }
  std::byte* locate(int32_t slot, int l, int p, int h, bool scales) {
    const int64_t phys = t_.slot(slot);
    std::byte* block = kv_.data() + phys / kBs * layout_.block_bytes();
    const int64_t tok = phys % kBs;
    if (scales) {
      const int64_t at = p == 0 ? layout_.k_scale_offset_bytes(l) : layout_.v_scale_offset_bytes(l);
      return block + at + (h * kBs + tok) * scale_;
    }
    const int64_t at = p == 0 ? layout_.k_offset_bytes(l) : layout_.v_offset_bytes(l);
    return block + at + (h * kBs + tok) * row_;
  }

  KvLayout layout_;
  HostKvBuffer kv_;
  const BlockTable& t_;
  int64_t row_;
  int64_t scale_;
};

TEST_F(CompactTokensTest, TheTableHoldsTheLiveSlotsInFewerBlocks) {
  BlockTable t(kBs);
  ASSERT_TRUE(m_.allocate_slots(t, 14));
  EXPECT_EQ(values(t.blocks()), (V{1, 2, 3, 4}));
  const int32_t free_before = m_.pool().num_free_blocks();
  const std::vector<SlotCopy> copies = m_.compact_tokens(t, V{1, 5, 6, 12});
  // Slot s lives in block s / 4 + 1 at offset s % 4: physical 4 * block + offset.
  EXPECT_EQ(copies, (std::vector<SlotCopy>{{3 * 4 + 2, 1 * 4 + 1},     // slot 10 -> 1
                                           {3 * 4 + 3, 2 * 4 + 1},     // slot 11 -> 5
                                           {4 * 4 + 1, 2 * 4 + 2}}));  // slot 13 -> 6
  EXPECT_EQ(values(t.blocks()), (V{1, 2, 3}));
  EXPECT_EQ(t.num_tokens(), 10);
  EXPECT_EQ(t.num_evicted_tokens(), 4);
  EXPECT_EQ(m_.pool().num_free_blocks(), free_before + 1) << "block 4 went back";
  const BlockTable* tables[] = {&t};
  m_.check_invariants(tables);
  ASSERT_TRUE(m_.allocate_slots(t, 3));
  EXPECT_EQ(t.blocks().size(), 4u);
  m_.free(t);
  EXPECT_EQ(m_.pool().num_free_blocks(), 16);
}

TEST_F(CompactTokensTest, RefusesToWriteABlockAnotherTableShares) {
  BlockTable parent(kBs), child(kBs);
  ASSERT_TRUE(m_.allocate_slots(parent, 12));
  m_.fork(parent, child);
  EXPECT_DEATH((void)m_.compact_tokens(child, V{1}), "shared or cached");
  // Removing only the tail writes nothing: allowed, and only the child's reference goes.
  EXPECT_TRUE(m_.compact_tokens(child, V{8, 9, 10, 11}).empty());
  EXPECT_EQ(m_.pool().ref_count(BlockId{3}), 1);
  m_.free(child);
  m_.free(parent);
  EXPECT_EQ(m_.pool().num_free_blocks(), 16);
}

// Every slot's token row carries its position in each layer, head, K and V (and INT8 scales):
// after compaction and copy_slots, slot j of the table holds the position compaction_moves says.
TEST_F(CompactTokensTest, CopySlotsMovesEveryLayerHeadAndScale) {
  for (const DType d : {DType::kF32, DType::kI8}) {
    SCOPED_TRACE(dtype_name(d));
    BlockTable t(kBs);
    MarkedPool pool(d, t);
    ASSERT_TRUE(can_copy_slots(pool.layout()));
    ASSERT_TRUE(m_.allocate_slots(t, 15));
    pool.mark_slots(15);
    const V gone = {0, 3, 4, 9, 13};
    std::vector<int32_t> positions = iota(15);
    copy_slots(pool.kv(), m_.compact_tokens(t, gone));
    compact_slot_values(positions, gone);
    ASSERT_EQ(t.num_tokens(), 10);
    for (int32_t s = 0; s < 10; ++s) {
      for (int l = 0; l < 2; ++l)
        for (int p = 0; p < 2; ++p)
          for (int h = 0; h < 2; ++h)
            ASSERT_TRUE(pool.holds(s, l, p, h, positions[static_cast<size_t>(s)]));
    }
    m_.free(t);
  }
  const KvLayout int4(
      KvSpec{.num_layers = 1, .num_kv_heads = 1, .head_dim = 8, .dtype = DType::kI4}, kBs);
  EXPECT_FALSE(can_copy_slots(int4));
}

// SnapKV per (layer, KV head): each head gives up its own slots (as many as the others); after
// compact_head_tokens and copy_slots, slot j of head i holds, in K and V and an INT8 layer's
// scales, the position head i's own compaction put there, and the row is one row of
// ceil(K / B) blocks. An FP8 layer has no scales in the pool to move.
TEST_F(CompactTokensTest, CompactHeadTokensMovesEachHeadsOwnTokens) {
  for (const DType d : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kI8}) {
    SCOPED_TRACE(dtype_name(d));
    BlockTable t(kBs);
    MarkedPool pool(d, t);
    ASSERT_TRUE(m_.allocate_slots(t, 15));
    pool.mark_slots(15);
    // Heads (layer 0, head 0), (0, 1), (1, 0), (1, 1): five slots each, different ones.
    const std::vector<V> gone = {
        {0, 3, 4, 9, 13}, {10, 11, 12, 13, 14}, {1, 2, 5, 6, 7}, {0, 1, 2, 3, 4}};
    const int32_t free_before = m_.pool().num_free_blocks();
    const std::vector<SlotCopy> copies = m_.compact_head_tokens(t, gone);
    for (const SlotCopy& c : copies) ASSERT_GE(c.head, 0);
    copy_slots(pool.kv(), copies);
    ASSERT_EQ(t.num_tokens(), 10);
    EXPECT_EQ(t.num_evicted_tokens(), 5);
    EXPECT_EQ(t.blocks().size(), 3u);
    EXPECT_EQ(m_.pool().num_free_blocks(), free_before + 1) << "the fourth block went back";
    for (int32_t head = 0; head < 4; ++head) {
      std::vector<int32_t> positions = iota(15);
      compact_slot_values(positions, gone[static_cast<size_t>(head)]);
      const int l = head / 2, h = head % 2;
      for (int32_t s = 0; s < 10; ++s) {
        for (int p = 0; p < 2; ++p) {
          ASSERT_TRUE(pool.holds(s, l, p, h, positions[static_cast<size_t>(s)])) << "head " << head;
        }
      }
    }
    const BlockTable* tables[] = {&t};
    m_.check_invariants(tables);
    m_.free(t);
    EXPECT_EQ(m_.pool().num_free_blocks(), 16);
  }
}

TEST_F(CompactTokensTest, CompactHeadTokensRefusesUnevenHeadsAndSharedBlocks) {
  BlockTable parent(kBs), child(kBs);
  ASSERT_TRUE(m_.allocate_slots(parent, 12));
  EXPECT_DEATH((void)m_.compact_head_tokens(parent, std::vector<V>{{1, 2}, {3}}), "as many");
  m_.fork(parent, child);
  EXPECT_DEATH((void)m_.compact_head_tokens(child, std::vector<V>{{1}, {9}}), "shared or cached");
  m_.free(child);
  m_.free(parent);
  EXPECT_EQ(m_.pool().num_free_blocks(), 16);
}

// Seeded random grow / evict / fork / free: each table's slots are followed through a shadow of
// the pool (what position each physical slot holds; copy-on-write copies and compaction's copies
// applied to it), so a wrong copy, a write into a shared block or a lost slot shows. Async: as
// the engine runs compaction on its copy thread, each compaction is planned (plan_compaction),
// and its copies land and its blocks go back only later, at the next operation that allocates
// (the engine's next step): forks, frees, other sequences' compactions and the growth of
// sequences that share nothing with them run while copies are in flight (a plan that gave its
// blocks back at once fails it), and the plans' blocks count in the reference check.
void grow_evict_fork_free(bool async) {
  // Async: a small pool, so that the free queue comes round to a block a plan gave up soon.
  KvCacheManager m(KvCacheConfig{.block_size = kBs,
                                 .enable_prefix_caching = false,
                                 .groups = {{KvGroupSpec{}, async ? 14 : 48}}});
  std::mt19937 rng(async ? 78 : 77);
  struct Seq {
    BlockTable table{kBs};
    std::vector<int32_t> positions;  // per slot
    int32_t length = 0;              // positions so far
    bool compacting = false;         // a plan of its table is in flight
  };
  std::vector<Seq> seqs;
  std::map<int64_t, int32_t> shadow;  // physical slot -> position written there
  std::vector<CompactionPlan> in_flight;
  int64_t num_deferred = 0;  // compactions whose copies waited for a later operation
  const auto apply_cow = [&] {
    for (const BlockCopy& c : m.take_pending_copies()) {
      for (int32_t o = 0; o < kBs; ++o) {
        const auto it = shadow.find(int64_t{c.src.value} * kBs + o);
        if (it != shadow.end()) shadow[int64_t{c.dst.value} * kBs + o] = it->second;
      }
    }
  };
  const auto apply_copies = [&](std::span<const SlotCopy> copies) {
    for (const SlotCopy& c : copies) shadow[c.dst] = shadow.at(c.src);
  };
  // The engine's step boundary: the copies land, then the plans' blocks go back.
  const auto finish = [&] {
    for (CompactionPlan& plan : in_flight) {
      apply_copies(plan.copies);
      m.release_compacted(plan);
    }
    in_flight.clear();
    for (Seq& s : seqs) s.compacting = false;
  };
  bool freed_in_flight = false;  // a compacting table was freed: its blocks' copies still land
  const auto grow = [&](Seq& s, int32_t n) {
    // The engine allocates only after the copies (its next step); here a sequence that neither
    // compacts nor shares a block (copy-on-write would read it) may grow meanwhile, so the plan
    // must keep its given-up blocks, the sources among them, from being allocated.
    bool shares = false;
    for (const BlockId b : s.table.blocks()) shares = shares || m.pool().ref_count(b) > 1;
    if (s.compacting || shares || freed_in_flight) finish();
    freed_in_flight = false;
    if (!m.allocate_slots(s.table, n)) return;
    apply_cow();
    for (int32_t i = 0; i < n; ++i) {
      const int32_t slot = s.table.num_tokens() - n + i;
      shadow[s.table.slot(slot)] = s.length;
      s.positions.push_back(s.length++);
    }
  };
  const auto check = [&] {
    std::vector<const BlockTable*> tables;
    for (const Seq& s : seqs) {
      tables.push_back(&s.table);
      ASSERT_EQ(static_cast<int32_t>(s.positions.size()), s.table.num_tokens());
      if (!in_flight.empty()) continue;  // the shadow catches up at finish()
      for (int32_t j = 0; j < s.table.num_tokens(); ++j) {
        ASSERT_EQ(shadow.at(s.table.slot(j)), s.positions[static_cast<size_t>(j)]) << "slot " << j;
      }
    }
    std::vector<const CompactionPlan*> plans;
    for (const CompactionPlan& p : in_flight) plans.push_back(&p);
    m.check_invariants(tables, plans);
  };
  for (int op = 0; op < 3000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 2 && seqs.size() < 6) {
      Seq s;
      grow(s, 1 + static_cast<int32_t>(rng() % 20));
      if (s.table.num_tokens() > 0) seqs.push_back(std::move(s));
    } else if (kind < 5 && !seqs.empty()) {
      grow(seqs[rng() % seqs.size()], 1 + static_cast<int32_t>(rng() % 3));
    } else if (kind < 8 && !seqs.empty()) {  // H2O over random mass, shared blocks locked
      Seq& s = seqs[rng() % seqs.size()];
      if (s.compacting) finish();  // one eviction per sequence per step
      const int32_t budget = 1 + static_cast<int32_t>(rng() % 12);
      const int32_t sink = static_cast<int32_t>(rng() % (budget + 1));
      const int32_t window = static_cast<int32_t>(rng() % (budget - sink + 1));
      std::vector<float> mass;
      std::vector<uint8_t> locked;
      for (int32_t j = 0; j < s.table.num_tokens(); ++j) {
        mass.push_back(static_cast<float>(rng() % 7));
        locked.push_back(m.pool().ref_count(s.table.blocks()[static_cast<size_t>(j / kBs)]) > 1);
      }
      const V gone =
          choose_evicted_tokens(h2o(budget, sink, window), s.positions, mass, locked, s.length);
      if (async) {
        CompactionPlan plan = m.plan_compaction(s.table, gone);
        if (!plan.copies.empty() || !plan.released.empty()) {
          in_flight.push_back(std::move(plan));
          s.compacting = true;
          ++num_deferred;
        }
      } else {
        apply_copies(m.compact_tokens(s.table, gone));
      }
      compact_slot_values(s.positions, gone);
      ASSERT_EQ(s.table.num_tokens() + s.table.num_evicted_tokens(), s.length);
    } else if (kind < 9 && !seqs.empty() && seqs.size() < 6) {
      const Seq& parent = seqs[rng() % seqs.size()];  // in flight too: n > 1 forks after SnapKV
      Seq child;
      m.fork(parent.table, child.table);
      child.positions = parent.positions;
      child.length = parent.length;
      child.compacting = parent.compacting;
      seqs.push_back(std::move(child));
    } else if (!seqs.empty()) {  // in flight too: a sequence may finish in its evicting step
      const size_t i = rng() % seqs.size();
      freed_in_flight = freed_in_flight || seqs[i].compacting;
      m.free(seqs[i].table);
      seqs.erase(seqs.begin() + static_cast<ptrdiff_t>(i));
    }
    check();
    if (::testing::Test::HasFatalFailure()) return;
  }
  finish();
  check();
  for (Seq& s : seqs) m.free(s.table);
  seqs.clear();
  EXPECT_EQ(m.pool().num_free_blocks(), m.pool().num_blocks() - 1) << "blocks leaked";
  if (async) {
    EXPECT_GT(num_deferred, 300) << "copies in flight across other operations";
  }
}

TEST(CompactTokensRandomTest, EverySlotHoldsItsPositionAndNothingLeaks) {
  grow_evict_fork_free(/*async=*/false);
}

TEST(CompactTokensRandomTest, CopiesInFlightAcrossForksAndFreesLoseNothingAndLeakNothing) {
  grow_evict_fork_free(/*async=*/true);
}

// The same per (layer, KV head), SnapKV per head: three heads, each giving up its own slots (as
// many as the others: choose_evicted_tokens_per_head over random scores, shared blocks locked),
// each head's position at every physical slot followed through a shadow of the pool; a copy that
// moved another head's row, or every head's, shows.
TEST(CompactTokensRandomTest, EveryHeadsSlotHoldsItsOwnPositionAndNothingLeaks) {
  constexpr int32_t kHeads = 3;
  KvCacheManager m(KvCacheConfig{
      .block_size = kBs, .enable_prefix_caching = false, .groups = {{KvGroupSpec{}, 48}}});
  std::mt19937 rng(78);
  struct Seq {
    BlockTable table{kBs};
    std::vector<std::vector<int32_t>> positions =
        std::vector<std::vector<int32_t>>(kHeads);  // per head, per slot
    int32_t length = 0;
  };
  std::vector<Seq> seqs;
  std::map<std::pair<int32_t, int64_t>, int32_t> shadow;  // (head, physical slot) -> position
  const auto apply_cow = [&] {
    for (const BlockCopy& c : m.take_pending_copies()) {
      for (int32_t h = 0; h < kHeads; ++h) {
        for (int32_t o = 0; o < kBs; ++o) {
          const auto it = shadow.find({h, int64_t{c.src.value} * kBs + o});
          if (it != shadow.end()) shadow[{h, int64_t{c.dst.value} * kBs + o}] = it->second;
        }
      }
    }
  };
  const auto grow = [&](Seq& s, int32_t n) {
    if (!m.allocate_slots(s.table, n)) return;
    apply_cow();
    for (int32_t i = 0; i < n; ++i) {
      const int32_t slot = s.table.num_tokens() - n + i;
      for (int32_t h = 0; h < kHeads; ++h) {
        shadow[{h, s.table.slot(slot)}] = s.length;
        s.positions[static_cast<size_t>(h)].push_back(s.length);
      }
      ++s.length;
    }
  };
  const auto check = [&] {
    std::vector<const BlockTable*> tables;
    for (const Seq& s : seqs) {
      tables.push_back(&s.table);
      for (int32_t h = 0; h < kHeads; ++h) {
        const std::vector<int32_t>& p = s.positions[static_cast<size_t>(h)];
        ASSERT_EQ(static_cast<int32_t>(p.size()), s.table.num_tokens());
        for (int32_t j = 0; j < s.table.num_tokens(); ++j) {
          ASSERT_EQ(shadow.at({h, s.table.slot(j)}), p[static_cast<size_t>(j)])
              << "head " << h << " slot " << j;
        }
      }
    }
    m.check_invariants(tables);
  };
  int compactions = 0;
  for (int op = 0; op < 3000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 2 && seqs.size() < 6) {
      Seq s;
      grow(s, 1 + static_cast<int32_t>(rng() % 20));
      if (s.table.num_tokens() > 0) seqs.push_back(std::move(s));
    } else if (kind < 5 && !seqs.empty()) {
      grow(seqs[rng() % seqs.size()], 1 + static_cast<int32_t>(rng() % 3));
    } else if (kind < 8 && !seqs.empty()) {  // per-head selection over random scores
      Seq& s = seqs[rng() % seqs.size()];
      const int32_t budget = 1 + static_cast<int32_t>(rng() % 12);
      const int32_t sink = static_cast<int32_t>(rng() % (budget + 1));
      const int32_t window = static_cast<int32_t>(rng() % (budget - sink + 1));
      std::vector<uint8_t> locked;
      for (int32_t j = 0; j < s.table.num_tokens(); ++j) {
        locked.push_back(m.pool().ref_count(s.table.blocks()[static_cast<size_t>(j / kBs)]) > 1);
      }
      std::vector<std::vector<float>> scores(kHeads);
      for (std::vector<float>& sc : scores) {
        for (int32_t j = 0; j < s.table.num_tokens(); ++j)
          sc.push_back(static_cast<float>(rng() % 7));
      }
      // Repeated, unlike SnapKV's one eviction, to stress compaction: after the first, heads
      // hold different positions, and the sinks and window are taken by head 0's.
      const ResolvedKvEviction policy{KvEvictionPolicy::kSnapKv, budget, sink, window};
      const std::vector<V> gone =
          choose_evicted_tokens_per_head(policy, s.positions[0], scores, locked, s.length);
      if (gone.empty()) continue;
      for (const SlotCopy& c : m.compact_head_tokens(s.table, gone)) {
        ASSERT_GE(c.head, 0);
        shadow[{c.head, c.dst}] = shadow.at({c.head, c.src});
      }
      for (int32_t h = 0; h < kHeads; ++h) {
        compact_slot_values(s.positions[static_cast<size_t>(h)], gone[static_cast<size_t>(h)]);
      }
      ASSERT_EQ(s.table.num_tokens() + s.table.num_evicted_tokens(), s.length);
      ++compactions;
    } else if (kind < 9 && !seqs.empty() && seqs.size() < 6) {
      const Seq& parent = seqs[rng() % seqs.size()];
      Seq child;
      m.fork(parent.table, child.table);
      child.positions = parent.positions;
      child.length = parent.length;
      seqs.push_back(std::move(child));
    } else if (!seqs.empty()) {
      const size_t i = rng() % seqs.size();
      m.free(seqs[i].table);
      seqs.erase(seqs.begin() + static_cast<ptrdiff_t>(i));
    }
    check();
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(compactions, 100);
  for (Seq& s : seqs) m.free(s.table);
  seqs.clear();
  EXPECT_EQ(m.pool().num_free_blocks(), m.pool().num_blocks() - 1) << "blocks leaked";
}

}  // namespace
}  // namespace strata::kv

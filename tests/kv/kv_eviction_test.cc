// Block-wise token eviction (kv_eviction.h, KvCacheManager::evict_blocks): each policy takes
// exactly the blocks its definition names (hand-computed cases), PagedEviction's score on
// constructed K/V, exact ids and reference counts when blocks go, shared blocks staying with the
// other table, a table with a gap never entering the prefix cache (a weakened 1-bit hash and a
// shadow of every block's content), and a seeded randomized run of evict / grow / fork / free
// with invariants after every operation and no block leaked.

#include "kv/kv_eviction.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_cache_manager.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::values;
using V = std::vector<int32_t>;

constexpr int32_t kBs = 4;

ResolvedKvEviction streaming(int32_t budget, int32_t sink, int32_t window) {
  return {KvEvictionPolicy::kStreamingLlm, budget, sink, window};
}
ResolvedKvEviction paged(int32_t budget, int32_t sink = 0, int32_t window = 0) {
  return {KvEvictionPolicy::kPagedEviction, budget, sink, window};
}

// ---- which blocks each policy takes --------------------------------------------------------

TEST(ChooseEvictedBlocksTest, WithinTheBudgetNothingGoes) {
  EXPECT_EQ(choose_evicted_blocks(streaming(12, 4, 8), 12, kBs), V{});
  EXPECT_EQ(choose_evicted_blocks(paged(12), 12, kBs, std::vector<float>(3, 1.0f)), V{});
  EXPECT_EQ(choose_evicted_blocks(ResolvedKvEviction{}, 1000, kBs), V{});
}

TEST(ChooseEvictedBlocksTest, StreamingLlmKeepsTheSinkBlocksAndTheBlocksCoveringTheWindow) {
  // 21 slots in 6 blocks: [0-3] [4-7] [8-11] [12-15] [16-19] [20]. Sink 4 = block 0; window 8 =
  // slots 13..20 = blocks 3, 4, 5. Blocks 1 and 2 go: 13 slots stay (more than the budget of 12:
  // the window's first block is partly outside it).
  EXPECT_EQ(choose_evicted_blocks(streaming(12, 4, 8), 21, kBs), (V{1, 2}));
  // With no window the newest blocks the budget leaves room for stay: 0, 4, 5 (4 + 4 + 1 = 9).
  EXPECT_EQ(choose_evicted_blocks(streaming(12, 4, 0), 21, kBs), (V{1, 2, 3}));
  // A sink of 5 positions holds two blocks; the oldest others go first until at most 12 slots
  // are left: 21 -> 17 -> 13 -> 9 (the sink blocks and the newest one).
  EXPECT_EQ(choose_evicted_blocks(streaming(12, 5, 0), 21, kBs), (V{2, 3, 4}));
  // No sink: only the newest blocks.
  EXPECT_EQ(choose_evicted_blocks(streaming(8, 0, 0), 21, kBs), (V{0, 1, 2, 3}));
  // The newest block is never taken, even when the sink and it alone exceed the budget.
  EXPECT_EQ(choose_evicted_blocks(streaming(2, 2, 0), 21, kBs), (V{1, 2, 3, 4}));
}

TEST(ChooseEvictedBlocksTest, StreamingLlmOnAFullNewestBlock) {
  // 16 slots, 4 full blocks; budget 8, sink 1, window 4 (exactly block 3): blocks 1, 2 go.
  EXPECT_EQ(choose_evicted_blocks(streaming(8, 1, 4), 16, kBs), (V{1, 2}));
  // A window of 5 reaches back into block 2: only block 1 can go.
  EXPECT_EQ(choose_evicted_blocks(streaming(8, 1, 5), 16, kBs), (V{1}));
}

TEST(ChooseEvictedBlocksTest, PagedEvictionTakesTheLowestScoresOutsideTheProtectedBlocks) {
  // 6 blocks (21 slots), budget 12: three must go. Block 5 (newest) scores lowest but stays.
  const std::vector<float> scores = {0.5f, 0.9f, 0.1f, 0.3f, 0.7f, 0.0f};
  EXPECT_EQ(choose_evicted_blocks(paged(12), 21, kBs, scores), (V{0, 2, 3}));
  // A sink of 1 keeps block 0; the next lowest, block 4, goes instead.
  EXPECT_EQ(choose_evicted_blocks(paged(12, 1), 21, kBs, scores), (V{2, 3, 4}));
  // A window of 8 (slots 13..20: blocks 3, 4, 5) leaves blocks 0..2: 21 - 12 = 9 <= 12.
  EXPECT_EQ(choose_evicted_blocks(paged(12, 0, 8), 21, kBs, scores), (V{0, 1, 2}));
  // Ties go oldest first.
  EXPECT_EQ(choose_evicted_blocks(paged(16), 21, kBs, std::vector<float>(6, 1.0f)), (V{0, 1}));
}

TEST(ChooseEvictedBlocksTest, ResolvedDefaultsAndErrors) {
  const Result<ResolvedKvEviction> s =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kStreamingLlm, 64}, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, streaming(64, 4, 60));
  const Result<ResolvedKvEviction> p =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kPagedEviction, 64}, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, paged(64, 0, 0));
  // The server's default policy and budget fill what the request leaves out.
  const KvEvictionParams defaults{KvEvictionPolicy::kStreamingLlm, 128, 8, -1};
  const Result<ResolvedKvEviction> d = resolve_kv_eviction(KvEvictionParams{}, defaults);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, streaming(128, 8, 120));
  const Result<ResolvedKvEviction> none =
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kNone}, defaults);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->active());
  EXPECT_FALSE(resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kStreamingLlm}, {}).ok())
      << "no budget anywhere";
  EXPECT_FALSE(
      resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kStreamingLlm, 8, 6, 4}, {}).ok());
  EXPECT_FALSE(resolve_kv_eviction(KvEvictionParams{KvEvictionPolicy::kStreamingLlm, 2}, {}).ok())
      << "the default sink of 4 exceeds a budget of 2";
  EXPECT_FALSE(validate_kv_eviction(KvEvictionParams{std::nullopt, -1}).ok());
  EXPECT_FALSE(validate_kv_eviction(KvEvictionParams{std::nullopt, 8, -2}).ok());
  EXPECT_EQ(parse_kv_eviction_policy("paged_eviction"), KvEvictionPolicy::kPagedEviction);
  EXPECT_EQ(parse_kv_eviction_policy("h2o"), KvEvictionPolicy::kH2O);
  EXPECT_EQ(parse_kv_eviction_policy("snapkv"), KvEvictionPolicy::kSnapKv);
  EXPECT_EQ(parse_kv_eviction_policy("H2O"), std::nullopt);
}

TEST(ChooseEvictedBlocksTest, MaxHeldSlotsBoundsWhatStaysPlusAStep) {
  // Budget 12 over protected blocks of 4 (sink) + 8 + 3 (window) = 15 slots: 15 + a block.
  EXPECT_EQ(max_held_slots(streaming(12, 4, 8), kBs, 1 << 20, 1 << 20), 19);
  // A budget above the protected blocks: the budget + a block.
  EXPECT_EQ(max_held_slots(streaming(64, 4, 8), kBs, 1 << 20, 1 << 20), 68);
  // No window: the newest block is protected whole.
  EXPECT_EQ(max_held_slots(paged(2), kBs, 1 << 20, 1 << 20), 8);
  // A prefill interval of 3 blocks: a step adds up to 12 slots.
  ResolvedKvEviction wide = streaming(64, 4, 8);
  wide.prefill_interval_tokens = 3 * kBs;
  EXPECT_EQ(max_held_slots(wide, kBs, 1 << 20, 1 << 20), 76);
  // Every eviction of the randomized run below stays within it.
  for (int32_t len = 1; len < 80; ++len) {
    for (const ResolvedKvEviction& p : {streaming(12, 4, 8), streaming(12, 5, 0), paged(6, 0, 3)}) {
      const std::vector<float> scores(static_cast<size_t>((len + kBs - 1) / kBs), 1.0f);
      const auto gone = static_cast<int64_t>(choose_evicted_blocks(p, len, kBs, scores).size());
      EXPECT_LE(len - gone * kBs + kBs, max_held_slots(p, kBs, 1 << 20, 1 << 20)) << len;
    }
  }
}

// ---- PagedEviction's score -----------------------------------------------------------------

// Writes K and V of (layer, head, token) into a block of layout (F32 or BF16 elements).
void put(const KvLayout& layout, std::byte* block, int32_t layer, int32_t head, int32_t token,
         const std::vector<float>& k, const std::vector<float>& v) {
  const KvSpec& spec = layout.spec();
  const int64_t base = (static_cast<int64_t>(head) * layout.block_size() + token) * spec.head_dim;
  const DType d = spec.layer_dtype(layer);
  const int64_t el = d == DType::kF32 ? 4 : 2;
  for (int32_t c = 0; c < spec.head_dim; ++c) {
    for (const auto& [off, x] :
         {std::pair{layout.k_offset_bytes(layer), k[static_cast<size_t>(c)]},
          std::pair{layout.v_offset_bytes(layer), v[static_cast<size_t>(c)]}}) {
      std::byte* at = block + off + (base + c) * el;
      if (d == DType::kF32) {
        std::memcpy(at, &x, 4);
      } else {
        const uint16_t h = f32_to_bf16(x);
        std::memcpy(at, &h, 2);
      }
    }
  }
}

TEST(BlockValueKeyRatioTest, TheMeanOfValueOverKeyNormsOverTokensLayersAndHeads) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const KvLayout layout(KvSpec{.num_layers = 2, .num_kv_heads = 2, .head_dim = 2, .dtype = dtype},
                          kBs);
    HostKvBuffer buf(layout, 2);
    std::byte* block = buf.data() + layout.block_bytes();
    // Token 0: |K| = 5 (3, 4), |V| = 10 (6, 8) -> 2 in every layer and head; token 1: |K| = 2,
    // |V| = 1 -> 0.5. Token 2 holds 1000 but is not counted (2 tokens scored).
    for (int32_t l = 0; l < 2; ++l) {
      for (int32_t h = 0; h < 2; ++h) {
        put(layout, block, l, h, 0, {3, 4}, {6, 8});
        put(layout, block, l, h, 1, {0, 2}, {1, 0});
        put(layout, block, l, h, 2, {1, 0}, {1000, 0});
      }
    }
    EXPECT_FLOAT_EQ(block_value_key_ratio(layout, block, 2), 1.25f) << dtype_name(dtype);
    EXPECT_FLOAT_EQ(block_value_key_ratio(layout, block, 1), 2.0f);
    EXPECT_TRUE(can_score_blocks(layout));
  }
  const KvLayout int4(
      KvSpec{.num_layers = 1, .num_kv_heads = 1, .head_dim = 8, .dtype = DType::kI4}, kBs);
  EXPECT_FALSE(can_score_blocks(int4));
}

// Quantized pools: the codes times their scales. Token 0 has codes K (3, 4), V (6, 8); token 1
// K (0, 2), V (1, 0). INT8 scales per token: K 2 and V 0.5 (|K| 10, |V| 5: 0.5), then K 1 and
// V 8 (2 and 8: 4), so 2.25; FP8's static layer scales K 2 and V 0.25 give 0.25 and 0.0625, so
// 0.15625. Unscaled codes would give 1.25 both times.
TEST(BlockValueKeyRatioTest, QuantizedPoolsScaleTheirCodes) {
  const KvLayout int8(
      KvSpec{.num_layers = 1, .num_kv_heads = 1, .head_dim = 2, .dtype = DType::kI8}, kBs);
  HostKvBuffer ibuf(int8, 1);
  std::byte* block = ibuf.data();
  const auto code = [&](int64_t off, int32_t i, int8_t c) { block[off + i] = std::byte(c); };
  const auto scale = [&](int64_t off, int32_t token, float x) {
    const uint16_t h = f32_to_f16(x);
    std::memcpy(block + off + token * 2, &h, 2);
  };
  const int64_t k = int8.k_offset_bytes(0), v = int8.v_offset_bytes(0);
  // Element i of the head's [token][2] codes: token 0's (3, 4) / (6, 8), token 1's (0, 2) / (1, 0).
  const int8_t k_codes[] = {3, 4, 0, 2}, v_codes[] = {6, 8, 1, 0};
  for (int32_t i = 0; i < 4; ++i) {
    code(k, i, k_codes[i]);
    code(v, i, v_codes[i]);
  }
  scale(int8.k_scale_offset_bytes(0), 0, 2.0f);
  scale(int8.v_scale_offset_bytes(0), 0, 0.5f);
  scale(int8.k_scale_offset_bytes(0), 1, 1.0f);
  scale(int8.v_scale_offset_bytes(0), 1, 8.0f);
  ASSERT_TRUE(can_score_blocks(int8));
  EXPECT_FLOAT_EQ(block_value_key_ratio(int8, block, 2), 2.25f);

  const KvLayout fp8(
      KvSpec{.num_layers = 1, .num_kv_heads = 1, .head_dim = 2, .dtype = DType::kF8E4M3}, kBs,
      KvStaticScales{{2.0f}, {0.25f}});
  HostKvBuffer fbuf(fp8, 1);
  std::byte* f = fbuf.data();
  const int64_t fk = fp8.k_offset_bytes(0), fv = fp8.v_offset_bytes(0);
  for (int32_t i = 0; i < 4; ++i) {
    f[fk + i] = std::byte(f32_to_fp8_e4m3(k_codes[i]));
    f[fv + i] = std::byte(f32_to_fp8_e4m3(v_codes[i]));
  }
  ASSERT_TRUE(can_score_blocks(fp8));
  EXPECT_FLOAT_EQ(block_value_key_ratio(fp8, f, 2), 0.15625f);
}

// ---- evict_blocks on tables ------------------------------------------------------------------

class EvictBlocksTest : public ::testing::Test {
 protected:
  explicit EvictBlocksTest(int32_t hash_bits = 256)
      : m_(KvCacheConfig{
            .block_size = kBs, .hash_bits = hash_bits, .groups = {{KvGroupSpec{}, 17}}}) {}

  KvCacheManager m_;
};

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST_F(EvictBlocksTest, TheEntriesLeaveTheRowAndTheirBlocksGoBack) {
  const std::vector<int32_t> prompt = iota_tokens(21);
  BlockTable t(kBs);
  ASSERT_TRUE(m_.allocate_slots(t, 21));
  m_.cache_full_blocks(t, prompt, 21, {});
  EXPECT_EQ(values(t.blocks()), (V{1, 2, 3, 4, 5, 6}));
  const int32_t free_before = m_.pool().num_free_blocks();
  m_.evict_blocks(t, V{1, 2});
  EXPECT_EQ(values(t.blocks()), (V{1, 4, 5, 6}));
  EXPECT_EQ(t.num_tokens(), 13);
  EXPECT_EQ(t.num_evicted_tokens(), 8);
  EXPECT_EQ(t.slot(12), 6 * kBs + 0) << "slot 12 (position 20) is in block 6";
  EXPECT_EQ(m_.pool().num_free_blocks(), free_before + 2);
  EXPECT_EQ(m_.pool().free_queue().back(), BlockId{3}) << "freed in order, to the back";
  EXPECT_TRUE(m_.pool().is_cached(BlockId{2})) << "its content is still the prompt's block 1";
  const BlockTable* tables[] = {&t};
  m_.check_invariants(tables);
  // Growing goes on behind the kept blocks.
  ASSERT_TRUE(m_.allocate_slots(t, 4));
  EXPECT_EQ(t.num_tokens(), 17);
  EXPECT_EQ(t.blocks().size(), 5u);
  m_.check_invariants(tables);
  m_.free(t);
  EXPECT_EQ(m_.pool().num_free_blocks(), 16);
  EXPECT_EQ(t.num_evicted_tokens(), 0);
}

TEST_F(EvictBlocksTest, ABlockSharedWithAnotherTableStaysWithIt) {
  BlockTable parent(kBs), child(kBs);
  ASSERT_TRUE(m_.allocate_slots(parent, 18));
  m_.fork(parent, child);
  m_.evict_blocks(child, V{0, 2});
  EXPECT_EQ(values(child.blocks()), (V{2, 4, 5}));
  EXPECT_EQ(child.num_evicted_tokens(), 8);
  EXPECT_EQ(parent.num_evicted_tokens(), 0);
  EXPECT_EQ(values(parent.blocks()), (V{1, 2, 3, 4, 5}));
  EXPECT_EQ(m_.pool().ref_count(BlockId{1}), 1) << "only the child's reference went";
  EXPECT_EQ(m_.pool().ref_count(BlockId{3}), 1);
  EXPECT_EQ(m_.pool().ref_count(BlockId{2}), 2);
  const BlockTable* tables[] = {&parent, &child};
  m_.check_invariants(tables);
  // The child's next token lands in the shared, partly filled block 5: it is copied first.
  ASSERT_TRUE(m_.allocate_slots(child, 1));
  EXPECT_EQ(m_.take_pending_copies().size(), 1u);
  m_.check_invariants(tables);
  m_.free(child);
  m_.free(parent);
  EXPECT_EQ(m_.pool().num_free_blocks(), 16);
}

TEST_F(EvictBlocksTest, RefusesTheNewestBlockAndUnorderedEntries) {
  BlockTable t(kBs);
  ASSERT_TRUE(m_.allocate_slots(t, 12));
  EXPECT_DEATH(m_.evict_blocks(t, V{2}), "never the newest");
  EXPECT_DEATH(m_.evict_blocks(t, V{1, 0}), "ascending");
  m_.free(t);
}

// A 1-bit hash makes every lookup collide; a shadow of what each block holds (the tokens of the
// prefix it was computed under, or nothing once it was written after an eviction) checks every
// block a lookup returns.
class EvictBlocksWeakHashTest : public EvictBlocksTest {
 protected:
  EvictBlocksWeakHashTest() : EvictBlocksTest(1) {}
};

TEST_F(EvictBlocksWeakHashTest, AGappedTableNeverEntersThePrefixCache) {
  const std::vector<int32_t> prompt = iota_tokens(16);
  BlockTable t(kBs);
  ASSERT_TRUE(m_.allocate_slots(t, 16));
  m_.cache_full_blocks(t, prompt, 16, {});
  EXPECT_EQ(m_.pool().num_cached_blocks(), 4);
  m_.evict_blocks(t, V{1, 2});
  // Decode 16 more positions after the gap: the table's entries 2..5 are full now (past the 4
  // blocks it had hashed) but their K/V attended to a gapped context: nothing is registered.
  std::vector<int32_t> tokens = prompt;
  for (int32_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(m_.allocate_slots(t, 1));
    tokens.push_back(500 + i);
    m_.cache_full_blocks(t, tokens, static_cast<int32_t>(tokens.size()), {});
  }
  EXPECT_EQ(m_.pool().num_cached_blocks(), 4);
  // The whole sequence looked up: only the prompt's blocks computed before the eviction, each
  // holding exactly the prefix it is returned for.
  const PrefixHit hit = m_.find_cached_prefix(tokens, {});
  EXPECT_EQ(values(hit.blocks()), (V{1, 2, 3, 4}));
  // A query that shares the kept blocks' slots but not the evicted ones' tokens gets block 0 only.
  std::vector<int32_t> other = tokens;
  other[5] = 7;
  EXPECT_EQ(values(m_.find_cached_prefix(other, {}).blocks()), (V{1}));
  m_.free(t);
}

// ---- randomized: evict / grow / fork / free ---------------------------------------------------

TEST(EvictBlocksRandomTest, InvariantsHoldAndNothingLeaksUnderRandomOperations) {
  for (const int32_t hash_bits : {256, 1}) {
    KvCacheManager m(
        KvCacheConfig{.block_size = kBs, .hash_bits = hash_bits, .groups = {{KvGroupSpec{}, 40}}});
    std::mt19937 rng(1234 + hash_bits);
    struct Seq {
      BlockTable table{kBs};
      std::vector<int32_t> tokens;
      int32_t num_computed = 0;  // positions, evicted ones included
    };
    std::vector<Seq> seqs;
    // What each block holds: the token prefix it was filled under, or nullopt when some of its
    // slots were written after its table's first eviction (or it was never full).
    std::map<int32_t, std::optional<std::vector<int32_t>>> shadow;
    auto check_all = [&] {
      std::vector<const BlockTable*> tables;
      for (const Seq& s : seqs) tables.push_back(&s.table);
      m.check_invariants(tables);
    };
    auto check_hit = [&](const std::vector<int32_t>& tokens, const PrefixHit& hit) {
      for (size_t i = 0; i < hit.blocks().size(); ++i) {
        const auto it = shadow.find(hit.blocks()[i].value);
        ASSERT_TRUE(it != shadow.end() && it->second.has_value()) << "a changed block was hit";
        const std::vector<int32_t> want(tokens.begin(),
                                        tokens.begin() + static_cast<ptrdiff_t>((i + 1) * kBs));
        ASSERT_EQ(*it->second, want) << "a hit block holds another prefix";
      }
    };
    // Computes n more positions of s (already allocated), marking blocks that become full.
    auto compute = [&](Seq& s, int32_t n) {
      const int32_t slots_before = s.table.num_tokens() - n;
      for (int32_t slot = slots_before; slot < s.table.num_tokens(); ++slot) {
        if ((slot + 1) % kBs != 0) continue;
        const BlockId b = s.table.blocks()[static_cast<size_t>(slot / kBs)];
        const int32_t end = slot + 1 + s.table.num_evicted_tokens();
        shadow[b.value] =
            s.table.num_evicted_tokens() == 0
                ? std::optional(std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + end))
                : std::nullopt;
      }
      s.num_computed += n;
      m.cache_full_blocks(s.table, s.tokens, s.num_computed, {});
    };
    auto copy_pending = [&] {
      for (const BlockCopy& c : m.take_pending_copies()) shadow[c.dst.value] = std::nullopt;
    };
    for (int op = 0; op < 4000; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 3 && seqs.size() < 6) {  // a new sequence from a small alphabet: prefixes repeat
        Seq s;
        const int32_t len = 1 + static_cast<int32_t>(rng() % 24);
        for (int32_t i = 0; i < len; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % 2));
        const PrefixHit hit = m.find_cached_prefix(s.tokens, {});
        check_hit(s.tokens, hit);
        const int32_t n = len - hit.num_tokens;
        if (!m.allocate_slots(s.table, n, &hit)) continue;
        s.num_computed = hit.num_tokens;
        // Fresh blocks hold nothing yet.
        for (size_t i = hit.blocks().size(); i < s.table.blocks().size(); ++i) {
          shadow[s.table.blocks()[i].value] = std::nullopt;
        }
        compute(s, n);
        seqs.push_back(std::move(s));
      } else if (kind < 6 && !seqs.empty()) {  // decode one token
        Seq& s = seqs[rng() % seqs.size()];
        const size_t blocks_before = s.table.blocks().size();
        if (!m.allocate_slots(s.table, 1)) continue;
        copy_pending();
        if (s.table.blocks().size() > blocks_before)
          shadow[s.table.blocks().back().value] = std::nullopt;
        s.tokens.push_back(static_cast<int32_t>(rng() % 2));
        compute(s, 1);
      } else if (kind < 8 && !seqs.empty()) {  // evict under a random policy
        Seq& s = seqs[rng() % seqs.size()];
        const int32_t budget = 1 + static_cast<int32_t>(rng() % 16);
        const int32_t sink = static_cast<int32_t>(rng() % (budget + 1));
        const int32_t window = static_cast<int32_t>(rng() % (budget - sink + 1));
        const bool by_score = rng() % 2 == 0;
        const ResolvedKvEviction policy{
            by_score ? KvEvictionPolicy::kPagedEviction : KvEvictionPolicy::kStreamingLlm, budget,
            sink, window};
        std::vector<float> scores;
        const auto nb = static_cast<int32_t>(s.table.blocks().size());
        for (int32_t i = 0; i < nb; ++i) scores.push_back(static_cast<float>(rng() % 5));
        const std::vector<int32_t> entries =
            choose_evicted_blocks(policy, s.table.num_tokens(), kBs, scores);
        const int32_t before = s.table.num_tokens();
        m.evict_blocks(s.table, entries);
        ASSERT_EQ(s.table.num_tokens(), before - static_cast<int32_t>(entries.size()) * kBs);
        ASSERT_EQ(s.table.num_tokens() + s.table.num_evicted_tokens(), s.num_computed);
      } else if (kind < 9 && !seqs.empty() && seqs.size() < 6) {  // fork
        Seq& parent = seqs[rng() % seqs.size()];
        Seq child;
        m.fork(parent.table, child.table);
        child.tokens = parent.tokens;
        child.num_computed = parent.num_computed;
        seqs.push_back(std::move(child));
      } else if (!seqs.empty()) {  // free
        const size_t i = rng() % seqs.size();
        m.free(seqs[i].table);
        seqs.erase(seqs.begin() + static_cast<ptrdiff_t>(i));
      }
      check_all();
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (Seq& s : seqs) m.free(s.table);
    seqs.clear();
    check_all();
    EXPECT_EQ(m.pool().num_free_blocks(), m.pool().num_blocks() - 1) << "blocks leaked";
  }
}

}  // namespace
}  // namespace strata::kv

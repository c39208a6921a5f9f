// Token eviction's compaction keeps attention exact (docs/kv-eviction.md; issue 39): after a
// 40-token prompt, seven tokens are evicted and compaction moves the newest live tokens into
// their holes (kv::compaction_moves, kv::copy_slots); the next two decode steps read those
// blocks as ordinary blocks. Their logits match, within float rounding, those of a cache built
// to hold the same 33 tokens' K/V in position order in fresh blocks -- the attention over the
// kept tokens, however they are laid out. F32 and INT8 caches (whose per-token scales move
// with the tokens), on the llama3-gqa fixture; and the same per (layer, KV head), each head
// keeping its own tokens (SnapKV per head).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "hand_batch.h"
#include "kv/block_copy.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_eviction.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace strata::model {
namespace {

const std::string kModels = std::string(STRATA_TEST_DATA_DIR) + "/models/";
constexpr int32_t kBs = 16;

// One sequence's step: tokens at positions [first_pos, ...), its row of blocks, the table's KV
// slots after the step (kv_len), the new tokens in the last slots. Returns the last row's logits.
std::vector<float> step(Model& model, kv::HostKvBuffer& kv, const std::vector<int32_t>& tokens,
                        int32_t first_pos, const std::vector<int32_t>& blocks, int32_t kv_len,
                        ThreadPool& pool) {
  test_util::HandBatch batch(kBs);
  batch.add(tokens, first_pos, blocks, kv_len);
  std::vector<float> logits(static_cast<size_t>(model.vocab_size()));
  const Status s = model.forward(batch.view(), kv, logits, pool);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return logits;
}

int64_t physical(const std::vector<int32_t>& blocks, int32_t slot) {
  return int64_t{blocks[static_cast<size_t>(slot / kBs)]} * kBs + slot % kBs;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double{a[i]} - b[i]));
  return d;
}

TEST(CompactionExactTest, CompactedBlocksGiveTheAttentionOverTheKeptTokens) {
  ThreadPool pool(2);
  Model model = Model::load({kModels + "llama3-gqa"});
  for (const DType dtype : {DType::kF32, DType::kI8}) {
    SCOPED_TRACE(dtype_name(dtype));
    kv::HostKvBuffer compacted(kv::KvLayout(model.kv_spec(dtype), kBs), 8);
    std::vector<int32_t> prompt(40);
    for (int32_t i = 0; i < 40; ++i) prompt[static_cast<size_t>(i)] = (i * 7 + 3) % 64;
    const std::vector<int32_t> row = {1, 2, 3};
    (void)step(model, compacted, prompt, 0, row, 40, pool);
    const std::vector<int32_t> gone = {3, 7, 8, 20, 21, 22, 33};
    // The reference: the kept tokens' rows, in position order, in fresh blocks 4, 5, 6.
    kv::HostKvBuffer ordered(compacted.layout(), 8);
    std::copy_n(compacted.data(), compacted.size_bytes(), ordered.data());
    const std::vector<int32_t> fresh = {4, 5, 6};
    std::vector<kv::SlotCopy> in_order;
    int32_t next = 0;
    for (int32_t slot = 0; slot < 40; ++slot) {
      if (std::find(gone.begin(), gone.end(), slot) != gone.end()) continue;
      in_order.push_back({physical(row, slot), physical(fresh, next++)});
    }
    kv::copy_slots(ordered, in_order);
    // Compaction in place: holes 3, 7, 8, 20, 21, 22 take slots 34..39 (33 itself went).
    kv::HostKvBuffer unmoved(compacted.layout(), 8);  // holes not filled: the check must see it
    std::copy_n(compacted.data(), compacted.size_bytes(), unmoved.data());
    std::vector<kv::SlotCopy> moves;
    for (const auto& [from, to] : kv::compaction_moves(40, gone)) {
      moves.push_back({physical(row, from), physical(row, to)});
    }
    ASSERT_EQ(moves.size(), 6u);
    kv::copy_slots(compacted, moves);
    // Two decode steps at positions 40 and 41, in slots 33 and 34 of each row.
    for (int32_t t = 0; t < 2; ++t) {
      const std::vector<int32_t> token = {(t * 5 + 11) % 64};
      const std::vector<float> a = step(model, compacted, token, 40 + t, row, 34 + t, pool);
      const std::vector<float> b = step(model, ordered, token, 40 + t, fresh, 34 + t, pool);
      const std::vector<float> c = step(model, unmoved, token, 40 + t, row, 34 + t, pool);
      const double range =
          *std::max_element(b.begin(), b.end()) - *std::min_element(b.begin(), b.end());
      const double tolerance = 1e-6 * std::max(1.0, range);
      EXPECT_LE(max_abs_diff(a, b), tolerance) << "step " << t;
      EXPECT_GT(max_abs_diff(c, b), 100 * tolerance) << "unfilled holes differ";
    }
  }
}

// SnapKV per (layer, KV head): every head gives up seven of the 40 tokens, a different seven,
// and compaction moves each head's own newest live tokens into its own holes (SlotCopy::head),
// so slot i holds a different position in different heads. The next two decode steps match a
// cache where each head holds its own kept tokens in position order in fresh blocks; the causal
// mask is by slot, and every kept slot precedes the new tokens in every head. Compacting every
// head with one head's choice instead does not match. F32, FP8 and INT8.
TEST(CompactionExactTest, PerHeadCompactionGivesEachHeadsAttentionOverItsOwnTokens) {
  ThreadPool pool(2);
  Model model = Model::load({kModels + "llama3-gqa"});
  for (const DType dtype : {DType::kF32, DType::kF8E4M3, DType::kI8}) {
    SCOPED_TRACE(dtype_name(dtype));
    kv::HostKvBuffer compacted(kv::KvLayout(model.kv_spec(dtype), kBs), 8);
    const kv::KvSpec& spec = compacted.layout().spec();
    const int32_t num_heads = spec.num_layers * spec.num_kv_heads;
    ASSERT_GE(num_heads, 2);
    std::vector<int32_t> prompt(40);
    for (int32_t i = 0; i < 40; ++i) prompt[static_cast<size_t>(i)] = (i * 7 + 3) % 64;
    const std::vector<int32_t> row = {1, 2, 3};
    (void)step(model, compacted, prompt, 0, row, 40, pool);
    // Head h gives up seven slots of its own: 3 + 5h, ... (mod 40, sorted, distinct).
    std::vector<std::vector<int32_t>> gone(static_cast<size_t>(num_heads));
    for (int32_t h = 0; h < num_heads; ++h) {
      std::vector<int32_t>& g = gone[static_cast<size_t>(h)];
      for (int32_t k = 0; k < 7; ++k) g.push_back((3 + 5 * h + 6 * k) % 40);
      std::sort(g.begin(), g.end());
      ASSERT_EQ(std::adjacent_find(g.begin(), g.end()), g.end());
    }
    ASSERT_NE(gone[0], gone[1]);
    kv::HostKvBuffer ordered(compacted.layout(), 8);
    std::copy_n(compacted.data(), compacted.size_bytes(), ordered.data());
    kv::HostKvBuffer one_choice(compacted.layout(), 8);  // every head compacted with head 0's
    std::copy_n(compacted.data(), compacted.size_bytes(), one_choice.data());
    const std::vector<int32_t> fresh = {4, 5, 6};
    std::vector<kv::SlotCopy> in_order, moves, shared_moves;
    for (int32_t h = 0; h < num_heads; ++h) {
      const std::vector<int32_t>& g = gone[static_cast<size_t>(h)];
      int32_t next = 0;
      for (int32_t slot = 0; slot < 40; ++slot) {
        if (std::find(g.begin(), g.end(), slot) != g.end()) continue;
        in_order.push_back({physical(row, slot), physical(fresh, next++), h});
      }
      for (const auto& [from, to] : kv::compaction_moves(40, g)) {
        moves.push_back({physical(row, from), physical(row, to), h});
      }
    }
    for (const auto& [from, to] : kv::compaction_moves(40, gone[0])) {
      shared_moves.push_back({physical(row, from), physical(row, to)});
    }
    kv::copy_slots(ordered, in_order);
    kv::copy_slots(compacted, moves);
    kv::copy_slots(one_choice, shared_moves);
    for (int32_t t = 0; t < 2; ++t) {
      const std::vector<int32_t> token = {(t * 5 + 11) % 64};
      const std::vector<float> a = step(model, compacted, token, 40 + t, row, 34 + t, pool);
      const std::vector<float> b = step(model, ordered, token, 40 + t, fresh, 34 + t, pool);
      const std::vector<float> c = step(model, one_choice, token, 40 + t, row, 34 + t, pool);
      const double range =
          *std::max_element(b.begin(), b.end()) - *std::min_element(b.begin(), b.end());
      const double tolerance = 1e-6 * std::max(1.0, range);
      EXPECT_LE(max_abs_diff(a, b), tolerance) << "step " << t;
      EXPECT_GT(max_abs_diff(c, b), 100 * tolerance) << "one choice for every head differs";
    }
  }
}

}  // namespace
}  // namespace strata::model

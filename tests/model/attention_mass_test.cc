// Model::forward's attention mass for token eviction (ForwardBatch::mass_offsets /
// attention_mass; issue 39): on the llama3-gqa (GQA) and mistral-swa (sliding window) fixtures,
// each wanted row sums to num_layers * num_attention_heads and is 0 past its token's position;
// a row is bit-identical whether its sequence runs alone or beside another, and whether its
// prompt is computed in one chunk or two; a step that wants no mass is unchanged; bad requests
// are refused before anything is written.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "hand_batch.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace strata::model {
namespace {

const std::string kModels = std::string(STRATA_TEST_DATA_DIR) + "/models/";
constexpr int32_t kBlockSize = 16;
constexpr float kSentinel = -7.0f;

std::vector<int32_t> prompt(int32_t len, int32_t seed, int64_t vocab) {
  std::vector<int32_t> tokens(static_cast<size_t>(len));
  for (int32_t i = 0; i < len; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((seed * 37 + i * 11 + i * i) % vocab);
  }
  return tokens;
}

// One sequence's part of a step: positions [begin, end) of its prompt, its K/V in `blocks`.
struct SeqStep {
  const std::vector<int32_t>* tokens;
  int32_t begin;
  int32_t end;
  std::vector<int32_t> blocks;  // block ids, one per kBlockSize positions
};

// A step's forward pass; every token row's mass is wanted, packed in token order.
struct StepResult {
  Status status;
  std::vector<int64_t> offsets;  // [num_tokens]
  std::vector<float> mass;
  std::vector<float> logits;  // each sequence's last row
};

class AttentionMassTest : public ::testing::Test {
 protected:
  AttentionMassTest() : pool_(2) {}

  // The step's batch; mass wanted when `want_mass`.
  StepResult run(Model& model, kv::HostKvBuffer& kv, const std::vector<SeqStep>& seqs,
                 bool want_mass = true, MassMode mode = MassMode::kSum) {
    test_util::HandBatch batch(kBlockSize);
    StepResult r;
    int64_t size = 0;
    for (const SeqStep& s : seqs) {
      const std::span<const int32_t> all(*s.tokens);
      batch.add(all.subspan(static_cast<size_t>(s.begin), static_cast<size_t>(s.end - s.begin)),
                s.begin, s.blocks, s.end);
      for (int32_t p = s.begin; p < s.end; ++p) {
        r.offsets.push_back(size);
        size += model.mass_row_size(mode, s.end);
      }
    }
    r.mass.assign(static_cast<size_t>(size), kSentinel);
    r.logits.resize(batch.num_seqs() * static_cast<size_t>(model.vocab_size()));
    ForwardBatch b = batch.view();
    const std::vector<MassMode> modes(mode != MassMode::kSum ? batch.num_tokens() : 0, mode);
    if (want_mass) {
      b.mass_offsets = r.offsets;
      b.attention_mass = r.mass;
      b.mass_modes = modes;
    }
    r.status = model.forward(b, kv, r.logits, pool_);
    return r;
  }

  // Token row t's mass over its first n slots.
  static std::vector<float> row(const StepResult& r, int32_t t, int32_t n) {
    const float* m = r.mass.data() + r.offsets[static_cast<size_t>(t)];
    return {m, m + n};
  }

  ThreadPool pool_;
};

kv::HostKvBuffer cache_of(const Model& model, DType dtype) {
  return kv::HostKvBuffer(kv::KvLayout(model.kv_spec(dtype), kBlockSize), 24);
}

TEST_F(AttentionMassTest, RowsSumToLayersTimesHeadsAndStopAtTheirPosition) {
  for (const char* name : {"llama3-gqa", "mistral-swa"}) {
    Model model = Model::load({kModels + name});
    const double expected = static_cast<double>(model.config().num_hidden_layers) *
                            static_cast<double>(model.config().num_attention_heads);
    kv::HostKvBuffer kv = cache_of(model, DType::kF32);
    // 80 positions: past mistral-swa's window of 64. A prefill chunk beside a whole prefill.
    const std::vector<int32_t> a = prompt(80, 1, model.vocab_size());
    const std::vector<int32_t> b = prompt(19, 2, model.vocab_size());
    const StepResult first = run(model, kv, {{&a, 0, 50, {3, 5, 7, 9, 11, 13}}});
    ASSERT_TRUE(first.status.ok()) << first.status.message();
    const StepResult r = run(model, kv, {{&a, 50, 80, {3, 5, 7, 9, 11, 13}}, {&b, 0, 19, {2, 4}}});
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    const auto check = [&](const StepResult& s, int32_t t, int32_t pos, int32_t kv_len) {
      const std::vector<float> m = row(s, t, kv_len);
      double sum = 0.0;
      for (int32_t j = 0; j < kv_len; ++j) {
        const float v = m[static_cast<size_t>(j)];
        if (j > pos) {
          ASSERT_EQ(v, 0.0f) << name << " token " << t << " slot " << j;
        } else {
          ASSERT_GE(v, 0.0f) << name << " token " << t << " slot " << j;
        }
        sum += v;
      }
      EXPECT_NEAR(sum, expected, 1e-3 * expected) << name << " token " << t;
    };
    for (int32_t t = 0; t < 50; ++t) check(first, t, t, 50);
    for (int32_t t = 0; t < 30; ++t) check(r, t, 50 + t, 80);
    for (int32_t t = 0; t < 19; ++t) check(r, 30 + t, t, 19);
    EXPECT_EQ(r.mass.size(), 30u * 80u + 19u * 19u);  // every float written, none beyond
    for (float v : r.mass) ASSERT_NE(v, kSentinel);
  }
}

// kMax rows (SnapKV shared): each slot gets the largest share one (layer, KV head) gave it, so it
// lies between the sum's share per (layer, KV head) and the sum, and never above a KV head's group
// of query heads; bit-identical beside another sequence.
TEST_F(AttentionMassTest, MaxRowsTakeTheLargestShareOfOneLayerAndKvHead) {
  Model model = Model::load({kModels + "llama3-gqa"});
  const int32_t layers = model.config().num_hidden_layers;
  const int32_t kv_heads = model.config().num_key_value_heads;
  const auto group = static_cast<float>(model.config().num_attention_heads / kv_heads);
  const std::vector<int32_t> a = prompt(41, 3, model.vocab_size());
  const std::vector<int32_t> b = prompt(17, 4, model.vocab_size());
  kv::HostKvBuffer kv_sum = cache_of(model, DType::kF32);
  const StepResult sum = run(model, kv_sum, {{&a, 0, 41, {1, 2, 3}}});
  kv::HostKvBuffer kv_max = cache_of(model, DType::kF32);
  const StepResult max = run(model, kv_max, {{&a, 0, 41, {1, 2, 3}}}, true, MassMode::kMax);
  ASSERT_TRUE(sum.status.ok() && max.status.ok());
  EXPECT_EQ(sum.logits, max.logits) << "the reduction changes no logit";
  for (int32_t t = 0; t < 41; ++t) {
    const std::vector<float> s_row = row(sum, t, 41), m_row = row(max, t, 41);
    for (int32_t j = 0; j < 41; ++j) {
      const float sv = s_row[static_cast<size_t>(j)], mv = m_row[static_cast<size_t>(j)];
      ASSERT_LE(mv, sv * (1 + 1e-5f) + 1e-7f) << t << " " << j;
      ASSERT_GE(mv * static_cast<float>(layers * kv_heads) * (1 + 1e-5f) + 1e-7f, sv)
          << t << " " << j;
      ASSERT_LE(mv, group * (1 + 1e-5f)) << t << " " << j;
      if (j > t) {
        ASSERT_EQ(mv, 0.0f);
      }
    }
  }
  kv::HostKvBuffer kv_batch = cache_of(model, DType::kF32);
  const StepResult batch =
      run(model, kv_batch, {{&b, 0, 17, {4, 9}}, {&a, 0, 41, {8, 6, 10}}}, true, MassMode::kMax);
  ASSERT_TRUE(batch.status.ok());
  for (int32_t t = 0; t < 41; ++t) EXPECT_EQ(row(batch, 17 + t, 41), row(max, t, 41)) << t;
}

// kPerHead rows (SnapKV per head): each (layer, KV head) part is that head's own share -- it sums
// to the KV head's group of query heads and is 0 past the row's position; their largest is the
// kMax row exactly, their sum the kSum row up to rounding; bit-identical beside another sequence
// and when the prompt is computed in two chunks.
TEST_F(AttentionMassTest, PerHeadRowsHoldEachLayerAndKvHeadsOwnShare) {
  Model model = Model::load({kModels + "llama3-gqa"});
  const int32_t layers = static_cast<int32_t>(model.config().num_hidden_layers);
  const int32_t kv_heads = static_cast<int32_t>(model.config().num_key_value_heads);
  const int32_t heads = layers * kv_heads;
  const auto group = static_cast<double>(model.config().num_attention_heads / kv_heads);
  const std::vector<int32_t> a = prompt(41, 3, model.vocab_size());
  const std::vector<int32_t> b = prompt(17, 4, model.vocab_size());
  kv::HostKvBuffer kv_sum = cache_of(model, DType::kF32);
  const StepResult sum = run(model, kv_sum, {{&a, 0, 41, {1, 2, 3}}});
  kv::HostKvBuffer kv_max = cache_of(model, DType::kF32);
  const StepResult max = run(model, kv_max, {{&a, 0, 41, {1, 2, 3}}}, true, MassMode::kMax);
  kv::HostKvBuffer kv_ph = cache_of(model, DType::kF32);
  const StepResult ph = run(model, kv_ph, {{&a, 0, 41, {1, 2, 3}}}, true, MassMode::kPerHead);
  ASSERT_TRUE(sum.status.ok() && max.status.ok() && ph.status.ok());
  EXPECT_EQ(sum.logits, ph.logits) << "the mass changes no logit";
  for (int32_t t = 0; t < 41; ++t) {
    const std::vector<float> all = row(ph, t, heads * 41);
    const std::vector<float> s_row = row(sum, t, 41), m_row = row(max, t, 41);
    for (int32_t lh = 0; lh < heads; ++lh) {
      double part = 0.0;
      for (int32_t j = 0; j < 41; ++j) {
        const float v = all[static_cast<size_t>(lh * 41 + j)];
        if (j > t) {
          ASSERT_EQ(v, 0.0f) << t << " " << lh << " " << j;
        }
        part += v;
      }
      EXPECT_NEAR(part, group, 1e-4 * group) << t << " " << lh;
    }
    for (int32_t j = 0; j < 41; ++j) {
      float largest = 0.0f;
      double total = 0.0;
      for (int32_t lh = 0; lh < heads; ++lh) {
        largest = std::max(largest, all[static_cast<size_t>(lh * 41 + j)]);
        total += all[static_cast<size_t>(lh * 41 + j)];
      }
      ASSERT_EQ(largest, m_row[static_cast<size_t>(j)]) << t << " " << j;
      ASSERT_NEAR(total, s_row[static_cast<size_t>(j)], 1e-5 * (1 + total)) << t << " " << j;
    }
  }
  kv::HostKvBuffer kv_batch = cache_of(model, DType::kF32);
  const StepResult batch = run(model, kv_batch, {{&b, 0, 17, {4, 9}}, {&a, 0, 41, {8, 6, 10}}},
                               true, MassMode::kPerHead);
  ASSERT_TRUE(batch.status.ok());
  for (int32_t t = 0; t < 41; ++t) {
    EXPECT_EQ(row(batch, 17 + t, heads * 41), row(ph, t, heads * 41)) << t;
  }
  kv::HostKvBuffer kv_chunks = cache_of(model, DType::kF32);
  const StepResult first =
      run(model, kv_chunks, {{&a, 0, 23, {5, 7, 11}}}, true, MassMode::kPerHead);
  const StepResult second =
      run(model, kv_chunks, {{&a, 23, 41, {5, 7, 11}}}, true, MassMode::kPerHead);
  ASSERT_TRUE(first.status.ok() && second.status.ok());
  for (int32_t t = 23; t < 41; ++t) {
    EXPECT_EQ(row(second, t - 23, heads * 41), row(ph, t, heads * 41)) << t;
  }
}

TEST_F(AttentionMassTest, SlotsOutsideTheWindowGetNothingFromWindowedLayers) {
  // mistral-swa: every layer slides (window 64), so position 79 gives slots 0..15 nothing.
  Model model = Model::load({kModels + "mistral-swa"});
  ASSERT_EQ(model.config().layer_sliding_window[0], 64);
  kv::HostKvBuffer kv = cache_of(model, DType::kF32);
  const std::vector<int32_t> a = prompt(80, 1, model.vocab_size());
  const StepResult r = run(model, kv, {{&a, 0, 80, {3, 5, 7, 9, 11}}});
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  const std::vector<float> m = row(r, 79, 80);
  const bool all_windowed =
      std::all_of(model.config().layer_sliding_window.begin(),
                  model.config().layer_sliding_window.end(), [](int32_t w) { return w == 64; });
  ASSERT_TRUE(all_windowed);
  for (int32_t j = 0; j < 16; ++j) EXPECT_EQ(m[static_cast<size_t>(j)], 0.0f) << j;
  for (int32_t j = 16; j < 80; ++j) EXPECT_GT(m[static_cast<size_t>(j)], 0.0f) << j;
}

TEST_F(AttentionMassTest, BitIdenticalAloneOrBesideAnotherSequence) {
  for (const DType dtype : {DType::kF32, DType::kI8}) {
    Model model = Model::load({kModels + "llama3-gqa"});
    const std::vector<int32_t> a = prompt(37, 1, model.vocab_size());
    const std::vector<int32_t> b = prompt(23, 2, model.vocab_size());
    kv::HostKvBuffer alone_kv = cache_of(model, dtype);
    const StepResult alone = run(model, alone_kv, {{&a, 0, 37, {1, 2, 3}}});
    ASSERT_TRUE(alone.status.ok()) << alone.status.message();
    kv::HostKvBuffer batch_kv = cache_of(model, dtype);
    const StepResult batch = run(model, batch_kv, {{&b, 0, 23, {4, 9}}, {&a, 0, 37, {8, 6, 10}}});
    ASSERT_TRUE(batch.status.ok()) << batch.status.message();
    for (int32_t t = 0; t < 37; ++t) {
      EXPECT_EQ(row(alone, t, 37), row(batch, 23 + t, 37)) << dtype_name(dtype) << " row " << t;
    }
    // A decode of the next position, alone and beside b's decode.
    std::vector<int32_t> a_next = a;
    a_next.push_back(5);
    std::vector<int32_t> b_next = b;
    b_next.push_back(7);
    const StepResult one = run(model, alone_kv, {{&a_next, 37, 38, {1, 2, 3}}});
    const StepResult two =
        run(model, batch_kv, {{&a_next, 37, 38, {8, 6, 10}}, {&b_next, 23, 24, {4, 9}}});
    ASSERT_TRUE(one.status.ok() && two.status.ok());
    EXPECT_EQ(row(one, 0, 38), row(two, 0, 38)) << dtype_name(dtype);
  }
}

TEST_F(AttentionMassTest, BitIdenticalInOneChunkOrTwo) {
  Model model = Model::load({kModels + "llama3-gqa"});
  const std::vector<int32_t> a = prompt(41, 3, model.vocab_size());
  kv::HostKvBuffer whole_kv = cache_of(model, DType::kF32);
  const StepResult whole = run(model, whole_kv, {{&a, 0, 41, {1, 2, 3}}});
  ASSERT_TRUE(whole.status.ok()) << whole.status.message();
  kv::HostKvBuffer chunk_kv = cache_of(model, DType::kF32);
  const StepResult first = run(model, chunk_kv, {{&a, 0, 18, {7, 5, 6}}});
  const StepResult second = run(model, chunk_kv, {{&a, 18, 41, {7, 5, 6}}});
  ASSERT_TRUE(first.status.ok() && second.status.ok());
  for (int32_t t = 0; t < 18; ++t) {
    // Slots 0..17 of the whole prefill's row; the rest (past position t) is 0 in both.
    EXPECT_EQ(row(first, t, 18), row(whole, t, 18)) << "row " << t;
  }
  for (int32_t t = 18; t < 41; ++t) {
    EXPECT_EQ(row(second, t - 18, 41), row(whole, t, 41)) << "row " << t;
  }
}

TEST_F(AttentionMassTest, NoMassWantedLeavesTheLogitsUnchanged) {
  Model model = Model::load({kModels + "llama3-gqa"});
  const std::vector<int32_t> a = prompt(21, 4, model.vocab_size());
  kv::HostKvBuffer kv1 = cache_of(model, DType::kF32);
  kv::HostKvBuffer kv2 = cache_of(model, DType::kF32);
  const StepResult with = run(model, kv1, {{&a, 0, 21, {1, 2}}});
  const StepResult without = run(model, kv2, {{&a, 0, 21, {1, 2}}}, /*want_mass=*/false);
  ASSERT_TRUE(with.status.ok() && without.status.ok());
  EXPECT_EQ(with.logits, without.logits);
  for (float v : without.mass) ASSERT_EQ(v, kSentinel);
}

TEST_F(AttentionMassTest, RefusesBadRequestsBeforeWritingAnything) {
  Model model = Model::load({kModels + "llama3-gqa"});
  kv::HostKvBuffer kv = cache_of(model, DType::kF32);
  const std::vector<int32_t> tokens = {3, 4, 5};
  const std::vector<int32_t> row = {1};
  test_util::HandBatch batch(kBlockSize);
  batch.add(tokens, 0, row, 3);
  ForwardBatch b = batch.view();
  std::vector<float> logits(static_cast<size_t>(model.vocab_size()));
  std::vector<float> mass(9, kSentinel);
  b.attention_mass = mass;
  const auto code_with = [&](const std::vector<int64_t>& offsets) {
    b.mass_offsets = offsets;
    return model.forward(b, kv, logits, pool_).code();
  };
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_EQ(code_with({0, 3}), kInvalid);        // not one offset per token
  EXPECT_EQ(code_with({0, 3, 7}), kInvalid);     // the last row needs 3 floats from 7
  EXPECT_EQ(code_with({0, 2, 6}), kInvalid);     // rows 0 and 1 overlap
  EXPECT_EQ(code_with({-1, 6, 4}), kInvalid);    // rows 2 and 1 overlap
  for (float v : mass) ASSERT_EQ(v, kSentinel);  // nothing written
  EXPECT_EQ(code_with({6, -1, 0}), StatusCode::kOk);
  EXPECT_EQ(std::count(mass.begin(), mass.end(), kSentinel), 3);  // row 1's place untouched
  EXPECT_EQ(code_with({-1, -1, -1}), StatusCode::kOk);
}

}  // namespace
}  // namespace strata::model

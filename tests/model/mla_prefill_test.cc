// MLA's two forms of prefill (model/mla_prefill.h): the rule that picks one per sequence, and
// Model::forward over hand-built steps of the deepseek-v2-mla fixture that mix an expanded
// prefill chunk with absorbed rows -- each row within rounding of the all-absorbed step, its
// attention mass too, and a row's expanded value bit-identical alone or beside another sequence.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "hand_batch.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_layout.h"
#include "model/mla_prefill.h"
#include "model/model.h"

namespace strata::model {
namespace {

const std::string kModels = std::string(STRATA_TEST_DATA_DIR) + "/models/";
constexpr int32_t kBlockSize = 16;

// DeepSeek-V2-Lite's attention: 16 heads, kv_lora_rank 512, rope 64, nope 128, v 128.
MlaConfig v2_lite() {
  MlaConfig m;
  m.kv_lora_rank = 512;
  m.qk_rope_head_dim = 64;
  m.qk_nope_head_dim = 128;
  m.v_head_dim = 128;
  return m;
}

TEST(MlaFormRuleTest, OneRowIsAlwaysAbsorbed) {
  for (const MlaPrefill mode : {MlaPrefill::kAuto, MlaPrefill::kAbsorbed, MlaPrefill::kExpanded}) {
    EXPECT_EQ(choose_mla_form(v2_lite(), 16, 1, 4096, mode), MlaForm::kAbsorbed);
    EXPECT_EQ(choose_mla_form(v2_lite(), 16, 1, 1, mode), MlaForm::kAbsorbed);
  }
  EXPECT_EQ(choose_mla_form(v2_lite(), 16, 2, 4096, MlaPrefill::kExpanded), MlaForm::kExpanded);
  EXPECT_EQ(choose_mla_form(v2_lite(), 16, 2048, 2048, MlaPrefill::kAbsorbed), MlaForm::kAbsorbed);
}

TEST(MlaFormRuleTest, LongChunksExpandAndShortChunksOverLongContextsStayAbsorbed) {
  const MlaConfig m = v2_lite();
  // A whole prompt up-projects no more rows than it has queries: expanded from a few rows.
  for (const int64_t t : {64, 256, 2048}) {
    EXPECT_EQ(choose_mla_form(m, 16, t, t, MlaPrefill::kAuto), MlaForm::kExpanded) << t;
  }
  // A short chunk over 8K cached tokens would pay the up-projection of all of them.
  for (const int64_t t : {2, 16, 64}) {
    EXPECT_EQ(choose_mla_form(m, 16, t, 8192 + t, MlaPrefill::kAuto), MlaForm::kAbsorbed) << t;
  }
  EXPECT_EQ(choose_mla_form(m, 16, 2048, 8192 + 2048, MlaPrefill::kAuto), MlaForm::kExpanded);
  // The cost model is what the rule compares.
  for (const int64_t t : {2, 16, 128, 512, 2048}) {
    for (const int64_t ctx : {int64_t{0}, int64_t{1024}, int64_t{8192}}) {
      const double absorbed = mla_form_cost(m, 16, t, ctx + t, MlaForm::kAbsorbed);
      const double expanded = mla_form_cost(m, 16, t, ctx + t, MlaForm::kExpanded);
      EXPECT_EQ(choose_mla_form(m, 16, t, ctx + t, MlaPrefill::kAuto),
                expanded < absorbed ? MlaForm::kExpanded : MlaForm::kAbsorbed);
    }
  }
}

TEST(MlaFormRuleTest, OnTheFixturesShapeWholePromptsExpandAndChunksOverACacheStayAbsorbed) {
  // kv_lora_rank 32 = qk_nope 32, four heads: the expanded form saves little attention, so only a
  // whole prompt (nothing cached to up-project besides its own rows) takes it. The engine suites
  // therefore mix the forms whenever they chunk a prompt.
  Model model = Model::load({kModels + "deepseek-v2-mla"});
  const MlaConfig& m = model.config().mla;
  const int64_t heads = model.config().num_attention_heads;
  for (const int64_t t : {2, 17, 300}) {
    EXPECT_EQ(choose_mla_form(m, heads, t, t, MlaPrefill::kAuto), MlaForm::kExpanded) << t;
  }
  for (const int64_t t : {2, 16, 37}) {
    EXPECT_EQ(choose_mla_form(m, heads, t, t + 263, MlaPrefill::kAuto), MlaForm::kAbsorbed) << t;
  }
}

std::vector<int32_t> prompt(int32_t len, int32_t seed, int64_t vocab) {
  std::vector<int32_t> tokens(static_cast<size_t>(len));
  for (int32_t i = 0; i < len; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((seed * 37 + i * 11 + i * i) % vocab);
  }
  return tokens;
}

struct SeqStep {
  const std::vector<int32_t>* tokens;
  int32_t begin;
  int32_t end;
  std::vector<int32_t> blocks;
};

struct StepResult {
  Status status;
  std::vector<int64_t> offsets;
  std::vector<float> mass;    // every row's, kv_len floats each
  std::vector<float> logits;  // each sequence's last row
};

class MlaPrefillModelTest : public ::testing::Test {
 protected:
  MlaPrefillModelTest()
      : pool_(2), model_(Model::load({kModels + "deepseek-v2-mla"})), vocab_(model_.vocab_size()) {}

  kv::HostKvBuffer cache() const {
    return kv::HostKvBuffer(kv::KvLayout(model_.kv_spec(DType::kF32), kBlockSize), 40);
  }

  StepResult run(kv::HostKvBuffer& kv, const std::vector<SeqStep>& seqs) {
    test_util::HandBatch batch(kBlockSize);
    StepResult r;
    int64_t size = 0;
    for (const SeqStep& s : seqs) {
      const std::span<const int32_t> all(*s.tokens);
      batch.add(all.subspan(static_cast<size_t>(s.begin), static_cast<size_t>(s.end - s.begin)),
                s.begin, s.blocks, s.end);
      for (int32_t p = s.begin; p < s.end; ++p) {
        r.offsets.push_back(size);
        size += s.end;
      }
    }
    r.mass.assign(static_cast<size_t>(size), -7.0f);
    r.logits.resize(batch.num_seqs() * static_cast<size_t>(vocab_));
    ForwardBatch b = batch.view();
    b.mass_offsets = r.offsets;
    b.attention_mass = r.mass;
    r.status = model_.forward(b, kv, r.logits, pool_);
    return r;
  }

  ThreadPool pool_;
  Model model_;
  int64_t vocab_;
};

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

// A decode row (absorbed) beside a 40-token chunk over a cached 50-token prefix (expanded, its
// context read back from the latent cache) and a whole 19-token prompt (expanded): the logits
// and the attention mass agree with the all-absorbed step to rounding, not bit for bit.
TEST_F(MlaPrefillModelTest, AMixedStepAgreesWithTheAbsorbedStep) {
  const std::vector<int32_t> a = prompt(90, 1, vocab_), b = prompt(19, 2, vocab_),
                             c = prompt(33, 3, vocab_);
  const std::vector<int32_t> a_blocks = {3, 5, 7, 9, 11, 13}, b_blocks = {2, 4},
                             c_blocks = {20, 21, 22};
  const auto step = [&](MlaPrefill mode) {
    model_.set_mla_prefill(mode);
    kv::HostKvBuffer kv = cache();
    EXPECT_TRUE(run(kv, {{&a, 0, 50, a_blocks}, {&c, 0, 32, c_blocks}}).status.ok());
    return run(kv, {{&a, 50, 90, a_blocks}, {&c, 32, 33, c_blocks}, {&b, 0, 19, b_blocks}});
  };
  const StepResult absorbed = step(MlaPrefill::kAbsorbed);
  const StepResult expanded = step(MlaPrefill::kExpanded);
  ASSERT_TRUE(absorbed.status.ok()) << absorbed.status.message();
  ASSERT_TRUE(expanded.status.ok()) << expanded.status.message();
  EXPECT_LE(rel_err(expanded.logits, absorbed.logits), 1e-5);
  EXPECT_NE(expanded.logits, absorbed.logits) << "the expanded form did not run";
  EXPECT_LE(rel_err(expanded.mass, absorbed.mass), 1e-5);
  // Each row still sums to layers x heads and gives nothing past its position.
  const double expected = 3.0 * 4.0;
  const auto check = [&](int32_t t, int32_t pos, int32_t kv_len) {
    const float* m = expanded.mass.data() + expanded.offsets[static_cast<size_t>(t)];
    double sum = 0.0;
    for (int32_t j = 0; j < kv_len; ++j) {
      if (j > pos) {
        ASSERT_EQ(m[j], 0.0f) << "row " << t << " slot " << j;
      }
      sum += m[j];
    }
    EXPECT_NEAR(sum, expected, 1e-3 * expected) << "row " << t;
  };
  for (int32_t t = 0; t < 40; ++t) check(t, 50 + t, 90);
  check(40, 32, 33);
  for (int32_t t = 0; t < 19; ++t) check(41 + t, t, 19);
}

// Within the expanded form a row depends on its position and the cached latent only: alone or
// beside another sequence, and in one chunk or two, bit for bit.
TEST_F(MlaPrefillModelTest, ExpandedRowsAreBitIdenticalAloneBatchedAndChunked) {
  model_.set_mla_prefill(MlaPrefill::kExpanded);
  const std::vector<int32_t> a = prompt(70, 1, vocab_), b = prompt(25, 2, vocab_);
  kv::HostKvBuffer solo_kv = cache();
  const StepResult solo = run(solo_kv, {{&a, 0, 70, {1, 2, 3, 4, 5}}});
  ASSERT_TRUE(solo.status.ok()) << solo.status.message();
  kv::HostKvBuffer batched_kv = cache();
  const StepResult batched = run(batched_kv, {{&b, 0, 25, {30, 31}}, {&a, 0, 70, {9, 7, 5, 3, 1}}});
  ASSERT_TRUE(batched.status.ok());
  const std::vector<float> solo_logits(solo.logits.begin(), solo.logits.begin() + vocab_);
  const std::vector<float> batched_logits(batched.logits.begin() + vocab_, batched.logits.end());
  EXPECT_EQ(solo_logits, batched_logits);
  EXPECT_EQ(solo.mass, std::vector<float>(batched.mass.begin() + 25 * 25, batched.mass.end()));
  kv::HostKvBuffer chunked_kv = cache();
  ASSERT_TRUE(run(chunked_kv, {{&a, 0, 29, {4, 8, 12, 16, 20}}}).status.ok());
  const StepResult second = run(chunked_kv, {{&a, 29, 70, {4, 8, 12, 16, 20}}});
  ASSERT_TRUE(second.status.ok());
  EXPECT_EQ(second.logits, solo_logits);
  EXPECT_EQ(second.mass, std::vector<float>(solo.mass.begin() + 29 * 70, solo.mass.end()));
}

}  // namespace
}  // namespace strata::model

// strata-tiny, the model the repository ships (models/strata-tiny), against transformers:
// logits of two real prompts within 1e-4 (relative L2 per stored position) of transformers'
// float64 forward on the BF16 checkpoint, greedy continuations identical, the q/k-norm knock-out
// far off, tokenizer ids equal to the `tokenizers` library's, and pass-key retrieval through the
// engine on a small grid. The reference comes from tools/tiny/make_tiny_fixture.py.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "eval/needle_prompt.h"
#include "eval/needle_report.h"
#include "eval/needle_run.h"
#include "kv/kv_accounting.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::engine {
namespace {

constexpr double kReferenceTolerance = 1e-4;
constexpr double kKnockoutFactor = 100.0;

const std::string kModel = std::string(STRATA_MODELS_DIR) + "/strata-tiny";
const std::string kFixture = std::string(STRATA_TEST_DATA_DIR) + "/models/strata-tiny-reference";

using test_util::int_tensor;
using test_util::max_row_rel_err;

class StrataTinyTest : public ::testing::Test {
 protected:
  StrataTinyTest()
      : pool_(2),
        model_(model::Model::load({kModel})),
        reference_(model::SafetensorsFile::open(kFixture + "/reference.safetensors")) {}

  std::vector<int32_t> tensor(const std::string& name) const {
    return int_tensor(reference_.tensor(name));
  }

  ThreadPool pool_;
  model::Model model_;
  model::SafetensorsFile reference_;
};

TEST_F(StrataTinyTest, ShapesAreTheShippedConfig) {
  const model::ModelConfig& c = model_.config();
  EXPECT_EQ(model::architecture_name(c.architecture), "Qwen3ForCausalLM");
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(model_.vocab_size(), 8192);
}

TEST_F(StrataTinyTest, LogitsMatchTransformersAtStoredPositions) {
  const int64_t vocab = model_.vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {tensor("prompt.0"), tensor("prompt.1")};
  // No block leaked: checked by prompt_logits.
  const std::vector<std::vector<float>> got = test_util::prompt_logits(model_, pool_, prompts);
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> positions = tensor("positions." + std::to_string(i));
    const auto* ref =
        static_cast<const float*>(reference_.tensor("logits." + std::to_string(i)).data);
    std::vector<float> rows;
    for (int32_t pos : positions) {
      const float* row = got[i].data() + static_cast<int64_t>(pos) * vocab;
      rows.insert(rows.end(), row, row + vocab);
    }
    EXPECT_LE(max_row_rel_err(rows.data(), ref, static_cast<int64_t>(positions.size()), vocab),
              kReferenceTolerance)
        << "prompt " << i;
  }
}

TEST_F(StrataTinyTest, KnockoutIsFarFromTheReference) {
  const int64_t rows = static_cast<int64_t>(tensor("positions.0").size());
  const auto* ko = static_cast<const float*>(reference_.tensor("knockout.no_qk_norm.0").data);
  const auto* ref = static_cast<const float*>(reference_.tensor("logits.0").data);
  EXPECT_GE(max_row_rel_err(ko, ref, rows, model_.vocab_size()),
            kKnockoutFactor * kReferenceTolerance);
}

TEST_F(StrataTinyTest, GreedyContinuationsMatchTransformers) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 2; ++i) {
    const auto max_tokens = static_cast<int32_t>(tensor("greedy." + std::to_string(i)).size());
    ASSERT_GE(max_tokens, 8);
    requests.push_back(test_util::greedy(tensor("prompt." + std::to_string(i)), max_tokens, -1));
  }
  auto got = test_util::run_together(model_, pool_, requests);  // in one batch, no leak
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*got)[static_cast<size_t>(i)].tokens[0], tensor("greedy." + std::to_string(i)))
        << "prompt " << i;
  }
}

TEST_F(StrataTinyTest, TokenizerIdsEqualTheTokenizersLibrary) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(kModel);
  std::ifstream in(kFixture + "/tokenizer_ids.json");
  ASSERT_TRUE(in);
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tok.encode(text, false), c["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tok.encode(text, true), c["ids_with_special"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tok.decode(c["ids"].get<std::vector<int32_t>>(), false), text);
  }
  EXPECT_EQ(tok.bos_token_id(), 0);
  EXPECT_EQ(tok.eos_token_id(), 1);
  EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);
}

TEST_F(StrataTinyTest, RetrievesThePassKeyThroughTheEngine) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(kModel);
  const eval::NeedleFiller filler = eval::NeedleFiller::load(tok, kModel);
  auto prompts = eval::build_needle_prompts(tok, filler, 0, {256, 512}, {0.0, 0.5, 1.0}, 1);
  ASSERT_TRUE(prompts.ok()) << prompts.status().to_string();
  EngineConfig config;
  config.num_blocks = 128;  // a few 512-token prompts at a time: admission waits for blocks
  auto engine = engine::create_engine(model_, pool_, config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto outcomes = eval::run_needle(**engine, *prompts);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().to_string();
  const eval::NeedleReport report = eval::summarize_needle(*prompts, *outcomes);
  EXPECT_EQ(report.num_correct, 6) << eval::format_needle_table(report);
  for (size_t i = 0; i < prompts->size(); ++i) {
    EXPECT_EQ((*outcomes)[i].output_ids.size(), (*prompts)[i].answer.size());
  }
  EXPECT_FALSE((*engine)->has_unfinished());
}

}  // namespace
}  // namespace strata::engine

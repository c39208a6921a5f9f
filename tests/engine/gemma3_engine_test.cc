// Gemma 3 in the CPU engine beyond the fixture suite's logits and invariances: two of the
// fixture's knock-outs reproduced through the checkpoint (a window past the prompt through
// config.json; transformers' unit norm weights, which Gemma's (1 + weight) turns into a scale of
// 2, through the weights) and matched within the reference tolerance; the multimodal
// checkpoint's layouts (Gemma3ForConditionalGeneration: text_config, weights under
// "language_model.model." or transformers 5's "model.language_model.", a vision tower beside
// them) giving the fixture's logits bit for bit; dummy weights of Gemma's tensors;
// and final_logit_softcapping applied to every logit.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "engine_testing.h"
#include "fixture_copy.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kReferenceTolerance = 1e-4;
constexpr int64_t kVocab = 160;
const fs::path kFixture = fs::path(STRATA_TEST_DATA_DIR) / "models" / "gemma3-hybrid";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

using test_util::F32Tensors;

F32Tensors fixture_tensors() { return test_util::read_f32_tensors(kFixture / "model.safetensors"); }

// A scratch model directory holding config and tensors.
class ScratchModel : public test_util::FixtureCopy {
 public:
  ScratchModel(const json& config, const F32Tensors& tensors) : test_util::FixtureCopy(kFixture) {
    write_config(config);
    test_util::write_safetensors(dir() / "model.safetensors", tensors);
  }
};

class Gemma3EngineTest : public ::testing::Test {
 protected:
  Gemma3EngineTest()
      : pool_(2),
        reference_(model::SafetensorsFile::open(kFixture / "reference.safetensors")),
        prompt_(test_util::int_tensor(reference_.tensor("prompt.0"))) {}

  std::vector<float> logits(const fs::path& dir) {
    model::Model model = model::Model::load({dir});
    EngineConfig c;
    c.max_num_seqs = 4;  // a window as long as the context keeps its pool small
    return test_util::prompt_logits(model, pool_, {prompt_}, c)[0];
  }
  const float* reference(const std::string& name) const {
    return static_cast<const float*>(reference_.tensor(name).data);
  }
  double error(const std::vector<float>& got, const std::string& name) const {
    EXPECT_EQ(got.size(), prompt_.size() * kVocab);
    return test_util::max_row_rel_err(got.data(), reference(name),
                                      static_cast<int64_t>(prompt_.size()), kVocab);
  }

  ThreadPool pool_;
  model::SafetensorsFile reference_;
  std::vector<int32_t> prompt_;
};

TEST_F(Gemma3EngineTest, AWindowPastThePromptIsTransformersNoWindowKnockout) {
  json config = read_json(kFixture / "config.json");
  ASSERT_GT(config["max_position_embeddings"].get<size_t>(), prompt_.size());
  config["sliding_window"] = config["max_position_embeddings"];
  const ScratchModel m(config, fixture_tensors());
  const std::vector<float> got = logits(m.dir());
  EXPECT_LE(error(got, "knockout.no_window.0"), kReferenceTolerance);
  EXPECT_GE(error(got, "logits.0"), 100 * kReferenceTolerance) << "the window did not matter";
}

TEST_F(Gemma3EngineTest, UnitNormWeightsAreTransformersUnitNormsKnockout) {
  // Every norm, q/k and sandwich norms included: a norm the engine skipped or read as weight
  // rather than 1 + weight would not land within tolerance.
  F32Tensors tensors = fixture_tensors();
  int num_norms = 0;
  for (auto& [name, t] : tensors) {
    if (name.find("norm") == std::string::npos || t.first.size() != 1) continue;
    std::fill(t.second.begin(), t.second.end(), 1.0f);
    ++num_norms;
  }
  EXPECT_EQ(num_norms, 3 * 6 + 1);  // 4 per layer's sandwich + q/k norms, and the final norm
  const ScratchModel m(read_json(kFixture / "config.json"), tensors);
  const std::vector<float> got = logits(m.dir());
  EXPECT_LE(error(got, "knockout.unit_norms.0"), kReferenceTolerance);
  EXPECT_GE(error(got, "logits.0"), 100 * kReferenceTolerance);
}

TEST_F(Gemma3EngineTest, FinalLogitSoftCappingCapsEveryLogit) {
  // transformers: logits = cap * tanh(logits / cap) after the LM head. The fixture's logits
  // reach past +-3, so a cap of 3 bends them far beyond rounding, but keeps every argmax.
  json config = read_json(kFixture / "config.json");
  constexpr double kCap = 3.0;
  config["final_logit_softcapping"] = kCap;
  const ScratchModel m(config, fixture_tensors());
  const std::vector<float> got = logits(m.dir());
  const std::vector<float> plain = logits(kFixture);
  ASSERT_EQ(got.size(), plain.size());
  double worst = 0.0;
  double moved = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = kCap * std::tanh(static_cast<double>(plain[i]) / kCap);
    worst = std::max(worst, std::abs(got[i] - want));
    moved = std::max(moved, std::abs(static_cast<double>(got[i]) - plain[i]));
  }
  EXPECT_LE(worst, 1e-6);
  EXPECT_GT(moved, 0.1) << "the cap did not reach the logits";
  for (size_t row = 0; row < prompt_.size(); ++row) {
    const auto g = got.begin() + static_cast<int64_t>(row * kVocab);
    const auto p = plain.begin() + static_cast<int64_t>(row * kVocab);
    EXPECT_EQ(std::max_element(g, g + kVocab) - g, std::max_element(p, p + kVocab) - p) << row;
  }
}

TEST_F(Gemma3EngineTest, TheMultimodalLayoutServesItsTextModelBitForBit) {
  json text = read_json(kFixture / "config.json");
  text.erase("architectures");
  const json config = {{"architectures", json::array({"Gemma3ForConditionalGeneration"})},
                       {"model_type", "gemma3"},
                       {"text_config", text},
                       {"vision_config", {{"hidden_size", 8}}},
                       {"eos_token_id", 2},
                       {"torch_dtype", "float32"}};
  const std::vector<float> want = logits(kFixture);
  // transformers 4 (the hub's checkpoints): language_model.model.*; transformers 5:
  // model.language_model.*.
  for (const bool v5 : {false, true}) {
    F32Tensors tensors;
    for (auto& [name, t] : fixture_tensors()) {
      ASSERT_EQ(name.rfind("model.", 0), 0u) << name;
      tensors[v5 ? "model.language_model." + name.substr(6) : "language_model." + name] = t;
    }
    tensors["vision_tower.vision_model.embeddings.patch_embedding.weight"] = {
        {2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}};
    tensors["multi_modal_projector.mm_input_projection_weight"] = {{8, 64},
                                                                   std::vector<float>(512)};
    const ScratchModel m(config, tensors);
    const std::vector<float> got = logits(m.dir());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got, want) << (v5 ? "transformers 5" : "transformers 4") << " layout";
    EXPECT_LE(error(got, "logits.0"), kReferenceTolerance);
  }
}

TEST_F(Gemma3EngineTest, DummyWeightsOfGemmasTensorsRun) {
  EngineConfig c;
  c.model_dir = kFixture.string();
  c.dummy_weights = true;
  c.max_num_seqs = 4;
  auto e = Engine::create(c);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_TRUE((*e)->submit(test_util::greedy(prompt_, 8, -1)).ok());
  const auto got = test_util::drain(**e);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.begin()->second.tokens.at(0).size(), 8u);
  EXPECT_EQ((*e)->kv_groups().size(), 2u) << "the sliding layers in a group of their own";
}

}  // namespace
}  // namespace strata::engine

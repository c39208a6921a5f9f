// Structured outputs through the engine (SamplingParams::structured): whatever the model would
// say, every output is a prefix of its constraint's language, a finished one is in it (JSON that
// parses, with its schema's required properties), an end token comes only where the output is
// complete, and the invariants hold: batch, preemption and n > 1 change no token. Models:
// strata-tiny (its own 8K vocabulary) and random weights over Qwen3's real 152K vocabulary.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_testing.h"
#include "grammar/grammar_compiler.h"
#include "model/model.h"
#include "strata/engine.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_bytes.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using Kind = StructuredOutput::Kind;
using test_util::Collected;

const fs::path kTiny = fs::path(STRATA_MODELS_DIR) / "strata-tiny";
const fs::path kSchemas = fs::path(STRATA_TEST_DATA_DIR) / "grammar" / "schemas";

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

StructuredOutput schema_constraint(const fs::path& file) {
  return StructuredOutput{Kind::kJsonSchema, read_file(file), {}};
}

// A sampled request: temperature 1 (the model's whole distribution, masked), seeded.
EngineRequest sampled(const std::vector<int32_t>& prompt, StructuredOutput constraint,
                      uint64_t seed, int32_t max_tokens) {
  EngineRequest r;
  r.prompt = prompt;
  r.params.temperature = 1.0f;
  r.params.seed = seed;
  r.params.max_tokens = max_tokens;
  r.params.structured = std::move(constraint);
  return r;
}

// Random weights over a real vocabulary: the qwen3-qknorm fixture's shape with Qwen3's
// tokenizer and its 151,936-row (padded) vocabulary, in a scratch directory.
fs::path qwen3_vocab_model_dir() {
  const fs::path to = fs::path(::testing::TempDir()) / ("qwen3-vocab-" + std::to_string(getpid()));
  fs::remove_all(to);
  fs::create_directories(to);
  nlohmann::json config =
      nlohmann::json::parse(read_file(fs::path(STRATA_TEST_DATA_DIR) / "models" / "qwen3-qknorm" /
                                      "config.json"));
  config["vocab_size"] = 151936;
  config["eos_token_id"] = 151645;  // <|im_end|>
  config["bos_token_id"] = nullptr;
  std::ofstream(to / "config.json") << config.dump(2);
  const fs::path tok = fs::path(STRATA_TEST_DATA_DIR) / "tokenizers" / "qwen3";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(tok / f, to / f);
  return to;
}

class StructuredOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ = new model::Model(model::Model::load({kTiny}));
    tiny_tokenizer_ = new tokenizer::Tokenizer(tokenizer::Tokenizer::load(kTiny));
  }
  static void TearDownTestSuite() {
    delete tiny_;
    delete tiny_tokenizer_;
  }

  static EngineConfig tiny_config() {
    EngineConfig c;
    c.model_dir = kTiny.string();
    c.num_blocks = 512;
    return c;
  }

  std::unique_ptr<Engine> engine(const EngineConfig& c) {
    auto e = create_engine(*tiny_, pool_, c);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  std::vector<int32_t> prompt(const std::string& text) const {
    return tiny_tokenizer_->encode(text, /*add_special_tokens=*/true);
  }

  static inline model::Model* tiny_ = nullptr;
  static inline tokenizer::Tokenizer* tiny_tokenizer_ = nullptr;
  ThreadPool pool_{2};
};

// What an output must be: walking its bytes (the end token excluded) never leaves the grammar;
// finished by "stop", it is complete and ends with an end token or at a state nothing follows.
struct OutputCheck {
  const grammar::ByteDfa& dfa;
  const tokenizer::Tokenizer& tok;
  std::vector<int32_t> end_tokens;

  std::string text(const std::vector<int32_t>& ids) const {
    std::string bytes;
    for (const int32_t id : ids) {
      if (std::find(end_tokens.begin(), end_tokens.end(), id) == end_tokens.end()) {
        bytes += tok.token_bytes(id);
      }
    }
    return bytes;
  }
  void expect_valid(const std::vector<int32_t>& ids, FinishReason finish,
                    const std::string& what) const {
    const std::string bytes = text(ids);
    const int32_t state = dfa.walk(dfa.start(), bytes);
    ASSERT_NE(state, grammar::ByteDfa::kDead) << what << ": left the grammar: " << bytes;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      EXPECT_EQ(std::find(end_tokens.begin(), end_tokens.end(), ids[i]), end_tokens.end())
          << what << ": an end token before the last";
    }
    if (finish == FinishReason::kStop) {
      EXPECT_TRUE(dfa.accepting(state)) << what << ": stopped before the output was complete: "
                                        << bytes;
    }
  }
};

// The grammars the checks walk, compiled apart from the engine's, over one tokenizer.
class Grammars {
 public:
  explicit Grammars(const tokenizer::Tokenizer& tok)
      : compiler_([&tok] { return tokenizer::vocab_bytes(tok); }, {}) {}
  std::shared_ptr<const grammar::CompiledGrammar> operator()(const StructuredOutput& c) {
    auto g = compiler_.compile(c);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    return g.ok() ? *g : nullptr;
  }

 private:
  grammar::GrammarCompiler compiler_;
};

// Every schema of the set, three seeds each, sampled at temperature 1 from strata-tiny: every
// output stays in its grammar, and the finished ones are complete JSON with the schema's
// required properties.
TEST_F(StructuredOutputTest, EverySchemasOutputsStayInItsGrammarAndFinishedOnesAreItsJson) {
  std::unique_ptr<Engine> e = engine(tiny_config());
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> p = prompt("Reply with JSON only.");
  Grammars compile(*tiny_tokenizer_);
  int complete = 0;
  int outputs = 0;
  for (const fs::directory_entry& file : fs::directory_iterator(kSchemas)) {
    const StructuredOutput c = schema_constraint(file.path());
    const auto grammar = compile(c);
    ASSERT_NE(grammar, nullptr) << file.path();
    std::vector<RequestId> ids;
    for (uint64_t seed = 1; seed <= 3; ++seed) ids.push_back(*e->submit(sampled(p, c, seed, 160)));
    std::map<RequestId, Collected> got = test_util::drain(*e);
    const OutputCheck check{*grammar->dfa, *tiny_tokenizer_, e->config().eos_token_ids};
    const nlohmann::json schema = nlohmann::json::parse(c.spec);
    for (const RequestId id : ids) {
      const Collected& out = got[id];
      ASSERT_TRUE(out.finished);
      ++outputs;
      const std::string what = file.path().filename().string();
      check.expect_valid(out.tokens.at(0), out.finish.at(0), what);
      if (out.finish.at(0) != FinishReason::kStop) continue;
      ++complete;
      const nlohmann::json value =
          nlohmann::json::parse(check.text(out.tokens.at(0)), nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << what << ": " << check.text(out.tokens.at(0));
      if (schema.contains("required")) {
        for (const auto& key : schema["required"]) {
          EXPECT_TRUE(value.contains(key.get<std::string>())) << what << ": no " << key;
        }
      }
    }
  }
  EXPECT_EQ(e->last_step().num_used_blocks, 0) << "blocks leaked";
  EXPECT_GT(complete, outputs / 3) << "most outputs should complete within 160 tokens";
}

TEST_F(StructuredOutputTest, ChoiceRegexAndJsonObjectOutputsAreInTheirLanguages) {
  std::unique_ptr<Engine> e = engine(tiny_config());
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> p = prompt("Answer:");
  const std::vector<std::string> choices = {"yes", "no", "it depends", "naïve ünïcode ✓"};
  std::vector<RequestId> choice_ids;
  std::vector<RequestId> regex_ids;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    choice_ids.push_back(*e->submit(sampled(p, {Kind::kChoice, "", choices}, seed, 32)));
    regex_ids.push_back(
        *e->submit(sampled(p, {Kind::kRegex, R"(\d{3}-[A-Z]{2}(-\d+)?)", {}}, seed, 32)));
  }
  const RequestId object_id = *e->submit(sampled(p, {Kind::kJsonObject, "", {}}, 9, 200));
  std::map<RequestId, Collected> got = test_util::drain(*e);
  const auto text = [&](RequestId id) {
    std::string s;
    for (const int32_t t : got[id].tokens.at(0)) {
      if (t != e->config().eos_token_ids.front()) s += tiny_tokenizer_->token_bytes(t);
    }
    return s;
  };
  for (const RequestId id : choice_ids) {
    EXPECT_EQ(got[id].finish.at(0), FinishReason::kStop);
    EXPECT_NE(std::find(choices.begin(), choices.end(), text(id)), choices.end()) << text(id);
  }
  const std::regex pattern(R"(\d{3}-[A-Z]{2}(-\d+)?)");
  for (const RequestId id : regex_ids) {
    if (got[id].finish.at(0) == FinishReason::kStop) {
      EXPECT_TRUE(std::regex_match(text(id), pattern)) << text(id);
    }
  }
  if (got[object_id].finish.at(0) == FinishReason::kStop) {
    const nlohmann::json v = nlohmann::json::parse(text(object_id), nullptr, false);
    EXPECT_TRUE(v.is_object()) << text(object_id);
  }
}

// A constraint that leaves nothing after its one string ends the sequence there, "stop", with no
// end token, even with ignore_eos; one that cannot finish within max_tokens ends "length".
TEST_F(StructuredOutputTest, ACompleteOutputStopsAndAnUnfinishableOneEndsAtTheLength) {
  std::unique_ptr<Engine> e = engine(tiny_config());
  ASSERT_NE(e, nullptr);
  EngineRequest only = sampled(prompt("Say it:"), {Kind::kChoice, "", {"exactly this"}}, 1, 50);
  only.params.ignore_eos = true;
  EngineRequest too_long = sampled(prompt("Count:"), {Kind::kRegex, "a{40}", {}}, 2, 10);
  const RequestId a = *e->submit(only);
  const RequestId b = *e->submit(too_long);
  std::map<RequestId, Collected> got = test_util::drain(*e);
  std::string said;
  for (const int32_t t : got[a].tokens.at(0)) said += tiny_tokenizer_->token_bytes(t);
  EXPECT_EQ(said, "exactly this");
  EXPECT_EQ(got[a].finish.at(0), FinishReason::kStop);
  EXPECT_EQ(got[b].finish.at(0), FinishReason::kLength);
  EXPECT_EQ(got[b].tokens.at(0).size(), 10u);
  std::string as;
  for (const int32_t t : got[b].tokens.at(0)) as += tiny_tokenizer_->token_bytes(t);
  EXPECT_EQ(as.find_first_not_of('a'), std::string::npos) << as;
}

// Batch and preemption equivalence: seeded constrained requests give the same tokens alone and
// together, and together in a pool so small that they preempt each other.
TEST_F(StructuredOutputTest, BatchAndPreemptionChangeNoToken) {
  const std::vector<int32_t> p = prompt("Give me a record as JSON.");
  std::vector<EngineRequest> requests;
  std::vector<fs::path> files;
  for (const fs::directory_entry& f : fs::directory_iterator(kSchemas)) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i < 6; ++i) {
    requests.push_back(sampled(p, schema_constraint(files[i]), 10 + i, 48));
  }
  std::vector<std::vector<int32_t>> alone;
  for (const EngineRequest& r : requests) {
    auto got = test_util::run_together(*tiny_, pool_, {r}, tiny_config());
    ASSERT_TRUE(got.ok());
    alone.push_back((*got)[0].tokens.at(0));
  }
  auto together = test_util::run_together(*tiny_, pool_, requests, tiny_config());
  ASSERT_TRUE(together.ok());
  std::unique_ptr<Engine> small =
      engine(test_util::preempting(tiny_config(), PreemptionMode::kRecompute));
  ASSERT_NE(small, nullptr);
  std::vector<RequestId> ids;
  for (const EngineRequest& r : requests) ids.push_back(*small->submit(r));
  std::map<RequestId, Collected> preempted = test_util::drain(*small);
  EXPECT_GT(small->totals().num_preemptions, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ((*together)[i].tokens.at(0), alone[i]) << "request " << i << " in a batch";
    EXPECT_EQ(preempted[ids[i]].tokens.at(0), alone[i]) << "request " << i << " preempted";
  }
}

// n > 1: every sibling is constrained from the same start, each with its own draws.
TEST_F(StructuredOutputTest, EverySiblingOfNIsConstrained) {
  std::unique_ptr<Engine> e = engine(tiny_config());
  ASSERT_NE(e, nullptr);
  const StructuredOutput c{Kind::kRegex, "(red|green|blue)-[0-9]{2}", {}};
  EngineRequest r = sampled(prompt("Colour:"), c, 5, 16);
  r.n = 4;
  const RequestId id = *e->submit(r);
  Collected got = test_util::drain(*e)[id];
  const auto grammar = Grammars(*tiny_tokenizer_)(c);
  const OutputCheck check{*grammar->dfa, *tiny_tokenizer_, e->config().eos_token_ids};
  ASSERT_EQ(got.tokens.size(), 4u);
  for (const auto& [index, tokens] : got.tokens) {
    check.expect_valid(tokens, got.finish.at(index), "sibling " + std::to_string(index));
    EXPECT_EQ(got.finish.at(index), FinishReason::kStop);
  }
}

TEST_F(StructuredOutputTest, InvalidOrOversizedConstraintsAreRefusedWithTheReason) {
  EngineConfig c = tiny_config();
  c.structured_output_max_states = 64;
  std::unique_ptr<Engine> e = engine(c);
  ASSERT_NE(e, nullptr);
  const Status bad_regex = e->compile_structured_output({Kind::kRegex, "(a", {}});
  EXPECT_EQ(bad_regex.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_regex.message().find("offset"), std::string::npos) << bad_regex.message();
  const Status bad_schema =
      e->compile_structured_output({Kind::kJsonSchema, R"({"type": "object", "properties": 3})", {}});
  EXPECT_EQ(bad_schema.code(), StatusCode::kInvalidArgument);
  const Status not_json = e->compile_structured_output({Kind::kJsonSchema, "{", {}});
  EXPECT_EQ(not_json.code(), StatusCode::kInvalidArgument);
  const Status too_big = e->compile_structured_output({Kind::kRegex, "[a-z]{200}", {}});
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument) << too_big.to_string();
  EXPECT_TRUE(e->compile_structured_output({Kind::kRegex, "[a-z]{20}", {}}).ok());
  // submit gives the same verdict and queues nothing.
  auto refused = e->submit(sampled(prompt("x"), {Kind::kRegex, "(a", {}}, 1, 8));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(e->has_unfinished());
  auto empty_choices = e->submit(sampled(prompt("x"), {Kind::kChoice, "", {}}, 1, 8));
  EXPECT_EQ(empty_choices.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StructuredOutputTest, AnEngineWithoutATokenizerRefusesConstraints) {
  EngineConfig c = tiny_config();
  c.model_dir.clear();
  std::unique_ptr<Engine> e = engine(c);
  ASSERT_NE(e, nullptr);
  const Status s = e->compile_structured_output({Kind::kJsonObject, "", {}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tokenizer"), std::string::npos);
}

// Random weights over Qwen3's byte-level vocabulary, whose model rows (151,936) outnumber the
// tokenizer's: multi-byte characters split across tokens, padded rows never sampled, and EOS
// (<|im_end|>, a special token with no bytes) only where the JSON is complete.
TEST_F(StructuredOutputTest, RandomWeightsOverQwen3sVocabularyStayInTheGrammar) {
  const fs::path dir = qwen3_vocab_model_dir();
  model::Model model = model::Model::load(
      {.model_dir = dir, .load_format = model::LoadFormat::kDummy, .dummy_seed = 7,
       .dummy_dtype = DType::kF32});
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);
  EngineConfig c;
  c.model_dir = dir.string();
  c.num_blocks = 256;
  auto e = create_engine(model, pool_, c);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const std::vector<int32_t> p = tok.encode("Write JSON: ", true);
  Grammars compile(tok);
  const std::vector<std::string> names = {"02_person.json", "12_address.json",
                                          "18_flags_and_nulls.json"};
  std::vector<std::pair<RequestId, std::shared_ptr<const grammar::CompiledGrammar>>> ids;
  for (const std::string& name : names) {
    const StructuredOutput sc = schema_constraint(kSchemas / name);
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      ids.emplace_back(*(*e)->submit(sampled(p, sc, seed, 96)), compile(sc));
    }
  }
  const StructuredOutput unicode{Kind::kChoice, "", {"日本語テキスト", "ελληνικά", "🙂🙃"}};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    ids.emplace_back(*(*e)->submit(sampled(p, unicode, seed, 32)), compile(unicode));
  }
  std::map<RequestId, Collected> got = test_util::drain(**e);
  for (const auto& [id, grammar] : ids) {
    const Collected& out = got[id];
    for (const int32_t t : out.tokens.at(0)) EXPECT_LT(t, tok.vocab_size()) << "a padded row";
    const OutputCheck check{*grammar->dfa, tok, (*e)->config().eos_token_ids};
    check.expect_valid(out.tokens.at(0), out.finish.at(0), "request " + std::to_string(id));
  }
  EXPECT_EQ((*e)->last_step().num_used_blocks, 0) << "blocks leaked";
}

}  // namespace
}  // namespace strata::engine

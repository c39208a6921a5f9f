// The benchmark's real-world schemas (tests/data/grammar/schemas) end to end through the grammar
// layer: each compiles to a byte DFA, and every output the DFA generates -- what a constrained
// model could write, whatever it wanted to say -- is JSON that nlohmann parses, with the schema's
// required properties present, in the schema's order.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/byte_dfa.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "tests/grammar/dfa_sampling.h"

namespace strata::grammar {
namespace {

using json = nlohmann::ordered_json;

TEST(SchemaOutputsTest, EveryGeneratedOutputIsJsonWithTheRequiredPropertiesInOrder) {
  const std::filesystem::path dir =
      std::filesystem::path(STRATA_TEST_DATA_DIR) / "grammar" / "schemas";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_GE(files.size(), 20u);
  std::mt19937 rng(17);
  for (const std::filesystem::path& f : files) {
    std::ifstream in(f);
    const json schema = json::parse(in);
    const Result<std::string> regex = json_schema_regex(schema);
    ASSERT_TRUE(regex.ok()) << f << ": " << regex.status().message();
    const Result<Nfa> nfa = compile_regex(*regex);
    ASSERT_TRUE(nfa.ok()) << f << ": " << nfa.status().message();
    const Result<ByteDfa> dfa = ByteDfa::build(*nfa);
    ASSERT_TRUE(dfa.ok()) << f << ": " << dfa.status().message();
    const std::vector<int32_t> far = distances_to_accept(*dfa);
    for (int i = 0; i < 50; ++i) {
      const std::string out = sample_match(*dfa, rng, 200, far);
      const json value = json::parse(out, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(value.is_discarded()) << f << " generated " << out;
      ASSERT_TRUE(value.is_object()) << f << " generated " << out;
      // The required properties, present and in the order the schema declares them.
      std::vector<std::string> want;
      for (const auto& [name, sub] : schema["properties"].items()) {
        const json& req = schema["required"];
        if (std::find(req.begin(), req.end(), name) != req.end()) want.push_back(name);
      }
      std::vector<std::string> got;
      for (const auto& [name, v] : value.items()) {
        if (std::find(want.begin(), want.end(), name) != want.end()) got.push_back(name);
      }
      EXPECT_EQ(got, want) << f << " generated " << out;
    }
  }
}

}  // namespace
}  // namespace strata::grammar

// Agreement with Hugging Face `tokenizers` 0.23 on real tokenizer files, over the few hundred
// texts of tools/fixtures/make_tokenizer_fixtures.py: ids without and with special tokens, decode with and
// without special tokens, lossless round trips where the normalizer keeps the text, and streaming
// deltas that add up to the full decode.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

namespace fs = std::filesystem;
const fs::path kData = STRATA_TEST_DATA_DIR;

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

struct Expectation {
  const char* name;
  bool lossless;         // decode(encode(text)) == text for every text
  bool bos_from_config;  // add_bos_token adds a BOS that tokenizer.json's post-processor does not
};

class FixtureTest : public ::testing::TestWithParam<Expectation> {
 protected:
  void SetUp() override {
    dir_ = kData / "tokenizers" / GetParam().name;
    if (!fs::exists(dir_ / "tokenizer.json")) {
      GTEST_SKIP() << dir_
                   << " is absent: run scripts/install_deps.sh to fetch the tokenizer files";
    }
    texts_ = read_json(kData / "tokenizer_fixtures" / "texts.json").get<std::vector<std::string>>();
    cases_ =
        read_json(kData / "tokenizer_fixtures" / (std::string(GetParam().name) + ".json"))["cases"];
    ASSERT_EQ(cases_.size(), texts_.size());
  }

  fs::path dir_;
  std::vector<std::string> texts_;
  nlohmann::json cases_;
};

std::string show(const std::string& text) { return nlohmann::json(text).dump().substr(0, 200); }

TEST_P(FixtureTest, IdsMatchHuggingFaceWithAndWithoutSpecialTokens) {
  const Tokenizer tok = Tokenizer::load(dir_);
  size_t same = 0, same_special = 0;
  for (size_t i = 0; i < texts_.size(); ++i) {
    const auto expected = cases_[i]["ids"].get<std::vector<int32_t>>();
    auto expected_special = cases_[i]["ids_post"].get<std::vector<int32_t>>();
    if (GetParam().bos_from_config)
      expected_special.insert(expected_special.begin(), *tok.bos_token_id());
    const std::vector<int32_t> ids = tok.encode(texts_[i], false);
    const std::vector<int32_t> ids_special = tok.encode(texts_[i], true);
    same += ids == expected;
    same_special += ids_special == expected_special;
    EXPECT_EQ(ids, expected) << "text " << i << ": " << show(texts_[i]);
    EXPECT_EQ(ids_special, expected_special) << "text " << i << ": " << show(texts_[i]);
  }
  std::printf("%s: ids %zu/%zu, ids with special tokens %zu/%zu\n", GetParam().name, same,
              texts_.size(), same_special, texts_.size());
}

TEST_P(FixtureTest, DecodeMatchesHuggingFaceAndRoundTrips) {
  const Tokenizer tok = Tokenizer::load(dir_);
  size_t same = 0, same_skip = 0, round_trips = 0;
  for (size_t i = 0; i < texts_.size(); ++i) {
    const auto ids = cases_[i]["ids"].get<std::vector<int32_t>>();
    const auto ids_hf = cases_[i]["ids_hf"].get<std::vector<int32_t>>();
    const std::string decoded = tok.decode(ids, false);
    const std::string decoded_skip = tok.decode(ids_hf, true);
    same += decoded == cases_[i]["decoded"];
    same_skip += decoded_skip == cases_[i]["decoded_skip"];
    round_trips += decoded == texts_[i];
    EXPECT_EQ(decoded, cases_[i]["decoded"].get<std::string>()) << "text " << i;
    EXPECT_EQ(decoded_skip, cases_[i]["decoded_skip"].get<std::string>()) << "text " << i;
    if (GetParam().lossless) {
      EXPECT_EQ(decoded, texts_[i]) << "text " << i;
    }
  }
  std::printf("%s: decode %zu/%zu, decode skipping special %zu/%zu, exact round trips %zu/%zu\n",
              GetParam().name, same, texts_.size(), same_skip, texts_.size(), round_trips,
              texts_.size());
}

TEST_P(FixtureTest, StreamingDeltasAreWholeCharactersAndAddUpToDecode) {
  const Tokenizer tok = Tokenizer::load(dir_);
  for (size_t i = 0; i < texts_.size(); ++i) {
    const auto ids = cases_[i]["ids_post"].get<std::vector<int32_t>>();
    for (const bool skip : {false, true}) {
      StreamDecoder stream(tok, skip);
      std::string text;
      for (const int32_t id : ids) {
        const std::string delta = stream.push(id);
        ASSERT_TRUE(is_valid_utf8(delta)) << "text " << i;
        text += delta;
      }
      text += stream.flush();
      EXPECT_EQ(text, tok.decode(ids, skip)) << "text " << i << " skip " << skip;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, FixtureTest,
                         ::testing::Values(Expectation{"qwen3", false, false},
                                           Expectation{"llama3_1", true, false},
                                           Expectation{"deepseek_v3", true, true},
                                           Expectation{"llama2", false, false}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::tokenizer

// The needle prompt builder on strata-tiny's tokenizer and filler: token for token equal to the
// prompts tools/tiny/tiny_needle.py wrote into the fixture, exactly `context` tokens with the needle at
// a line boundary, a pure function of (seed, context, depth, trial), and errors for bad input.

#include "eval/needle_prompt.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace strata::eval {
namespace {

const std::string kModel = std::string(STRATA_MODELS_DIR) + "/strata-tiny";
const std::string kFixture = std::string(STRATA_TEST_DATA_DIR) + "/models/strata-tiny-reference";

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(to)};
}

class NeedlePromptTest : public ::testing::Test {
 protected:
  NeedlePromptTest()
      : tok_(tokenizer::Tokenizer::load(kModel)), filler_(NeedleFiller::load(tok_, kModel)) {}

  NeedlePrompt build(uint64_t seed, int32_t context, double depth, int32_t trial) {
    auto p = build_needle_prompt(tok_, filler_, seed, context, depth, trial);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? *p : NeedlePrompt{};
  }

  tokenizer::Tokenizer tok_;
  NeedleFiller filler_;
};

TEST_F(NeedlePromptTest, EqualsThePythonBuilderTokenForToken) {
  std::ifstream in(kFixture + "/needle.json");
  ASSERT_TRUE(in) << "missing " << kFixture << "/needle.json";
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 4u);
  for (const auto& c : cases) {
    const NeedlePrompt p = build(c["seed"].get<uint64_t>(), c["context"].get<int32_t>(),
                                 c["depth"].get<double>(), c["trial"].get<int32_t>());
    SCOPED_TRACE("context " + c["context"].dump() + " depth " + c["depth"].dump());
    EXPECT_EQ(p.key, c["key"].get<std::string>());
    EXPECT_EQ(p.answer, c["answer"].get<std::vector<int32_t>>());
    EXPECT_EQ(p.needle_pos, c["needle_pos"].get<int32_t>());
    EXPECT_EQ(p.prompt, c["prompt"].get<std::vector<int32_t>>());
  }
}

TEST_F(NeedlePromptTest, PromptAndAnswerAreExactlyTheContext) {
  const std::vector<int32_t> question = tok_.encode(std::string(kNeedleQuestion), false);
  for (int32_t context : {40, 64, 300, 1000, 4096}) {
    for (double depth : {0.0, 0.37, 0.5, 1.0}) {
      const NeedlePrompt p = build(3, context, depth, 1);
      ASSERT_EQ(p.prompt.size() + p.answer.size(), static_cast<size_t>(context));
      EXPECT_EQ(p.prompt[0], *tok_.bos_token_id());
      EXPECT_EQ(tok_.decode(p.answer, false), p.key);
      EXPECT_EQ(p.key.size(), 5u);
      const std::string needle = "The pass key is " + p.key + ". Remember it.\n";
      const std::vector<int32_t> needle_ids = tok_.encode(needle, false);
      EXPECT_EQ(
          slice(p.prompt, static_cast<size_t>(p.needle_pos), p.needle_pos + needle_ids.size()),
          needle_ids);
      EXPECT_EQ(slice(p.prompt, p.prompt.size() - question.size(), p.prompt.size()), question);
    }
  }
}

TEST_F(NeedlePromptTest, DepthZeroAndOneAreTheEnds) {
  const NeedlePrompt first = build(5, 700, 0.0, 0);
  EXPECT_EQ(first.needle_pos, 1);  // right after BOS
  const NeedlePrompt last = build(5, 700, 1.0, 0);
  const size_t needle_len =
      tok_.encode("The pass key is " + last.key + ". Remember it.\n", false).size();
  const size_t question_len = tok_.encode(std::string(kNeedleQuestion), false).size();
  EXPECT_EQ(last.needle_pos + needle_len + question_len, last.prompt.size());
  const NeedlePrompt mid = build(5, 2000, 0.5, 0);
  EXPECT_NEAR(mid.needle_pos / 2000.0, 0.5, 0.05);
}

TEST_F(NeedlePromptTest, TextAfterTheNeedleRetokenizesToTheSameIds) {
  // Every boundary from the needle on is a line boundary, so the text encodes to the same ids.
  const NeedlePrompt p = build(11, 1500, 0.4, 2);
  const std::vector<int32_t> tail =
      slice(p.prompt, static_cast<size_t>(p.needle_pos), p.prompt.size());
  EXPECT_EQ(tok_.encode(tok_.decode(tail, false), false), tail);
}

TEST_F(NeedlePromptTest, APromptIsAPureFunctionOfItsCoordinates) {
  auto grid = build_needle_prompts(tok_, filler_, 9, {256, 512}, {0.0, 0.5, 1.0}, 3);
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->size(), 18u);
  const NeedlePrompt& in_grid = (*grid)[1 * 9 + 1 * 3 + 2];  // context 512, depth 0.5, trial 2
  EXPECT_EQ(in_grid.context, 512);
  EXPECT_EQ(in_grid.trial, 2);
  const NeedlePrompt alone = build(9, 512, 0.5, 2);
  EXPECT_EQ(alone.prompt, in_grid.prompt);
  EXPECT_EQ(alone.key, in_grid.key);
  EXPECT_NE(build(10, 512, 0.5, 2).prompt, alone.prompt);  // another seed
  EXPECT_NE(build(9, 512, 0.5, 3).prompt, alone.prompt);   // another trial
}

TEST_F(NeedlePromptTest, BadInputIsAnError) {
  EXPECT_FALSE(build_needle_prompt(tok_, filler_, 0, 20, 0.5, 0).ok());  // no room
  EXPECT_FALSE(build_needle_prompt(tok_, filler_, 0, 512, 1.5, 0).ok());
  EXPECT_FALSE(build_needle_prompt(tok_, filler_, 0, 512, -0.1, 0).ok());
  EXPECT_FALSE(build_needle_prompt(tok_, filler_, 0, 512, 0.5, -1).ok());
  EXPECT_THROW(NeedleFiller(tok_, "\n  \n\t\n"), Error);
  EXPECT_THROW(NeedleFiller::load(tok_, kFixture), Error);  // no needle_filler.txt there
}

}  // namespace
}  // namespace strata::eval

// OutputConstraint over a small hand-made vocabulary: the allowed set per state (the grammar's
// mask, end tokens only where the output is complete, model rows past the tokenizer's never),
// a complete output that nothing may follow, and a grammar the vocabulary cannot spell.

#include "engine/output_constraint.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/grammar_compiler.h"

namespace strata::engine {
namespace {

using Kind = StructuredOutput::Kind;
using Next = OutputConstraint::Next;

// Ids: 0 "a", 1 "b", 2 "ab", 3 "" (a special token: the end), 4 "c".
const std::vector<std::string> kVocab = {"a", "b", "ab", "", "c"};
constexpr int32_t kEnd = 3;
const std::vector<int32_t> kEnds = {kEnd};
const std::vector<int32_t> kNoEnds;

struct Fixture {
  grammar::GrammarCompiler compiler{[] { return kVocab; }, {}};

  // Over a model of vocab_size rows, ended by `ends`.
  OutputConstraint constraint(const std::string& regex, const std::vector<int32_t>& ends = kEnds,
                              int32_t vocab_size = 5) {
    auto g = compiler.compile({Kind::kRegex, regex, {}});
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    return OutputConstraint(*g, compiler.vocab(), ends, vocab_size);
  }
};

std::vector<int32_t> ids_in(const std::vector<uint64_t>& words, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    if ((words[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) ids.push_back(id);
  }
  return ids;
}

TEST(OutputConstraintTest, EndTokensOnlyWhereCompleteAndNothingPastTheTokenizersVocabulary) {
  Fixture f;
  // A model of 70 rows: ids 5..69 exist only in the model and are never allowed.
  OutputConstraint c = f.constraint("(ab)+", kEnds, 70);
  std::vector<uint64_t> allowed;
  ASSERT_EQ(c.allowed(allowed), Next::kSample);
  ASSERT_EQ(allowed.size(), 2u);
  EXPECT_EQ(ids_in(allowed, 70), (std::vector<int32_t>{0, 2}));  // "a", "ab"; not yet the end
  c.advance(2);
  ASSERT_EQ(c.allowed(allowed), Next::kSample);
  EXPECT_EQ(ids_in(allowed, 70), (std::vector<int32_t>{0, 2, kEnd}));  // complete: may end
  EXPECT_TRUE(c.ends(kEnd));
  EXPECT_FALSE(c.ends(0));
  c.advance(0);
  ASSERT_EQ(c.allowed(allowed), Next::kSample);
  EXPECT_EQ(ids_in(allowed, 70), (std::vector<int32_t>{1}));  // "b" only; mid-pair
  // A model with fewer rows than the tokenizer: the mask is cut to the model's vocabulary.
  OutputConstraint d = f.constraint("c", kNoEnds, 4);
  ASSERT_EQ(d.allowed(allowed), Next::kDeadEnd);  // "c" is id 4, past a 4-row model
}

TEST(OutputConstraintTest, ACompleteOutputThatNothingMayFollowEndsWithoutAToken) {
  Fixture f;
  std::vector<uint64_t> allowed;
  for (const std::vector<int32_t>* ends : {&kEnds, &kNoEnds}) {
    OutputConstraint c = f.constraint("ab", *ends);
    ASSERT_EQ(c.allowed(allowed), Next::kSample);
    c.advance(2);
    EXPECT_TRUE(c.complete());
    EXPECT_EQ(c.allowed(allowed), Next::kComplete);
  }
}

TEST(OutputConstraintTest, AGrammarTheVocabularyCannotSpellIsADeadEnd) {
  Fixture f;
  OutputConstraint c = f.constraint("a(x|y)");  // no token holds "x" or "y"
  std::vector<uint64_t> allowed;
  ASSERT_EQ(c.allowed(allowed), Next::kSample);
  EXPECT_EQ(ids_in(allowed, 5), (std::vector<int32_t>{0}));
  c.advance(0);
  EXPECT_EQ(c.allowed(allowed), Next::kDeadEnd);
}

TEST(OutputConstraintTest, CopiesMoveOnTheirOwn) {
  Fixture f;
  OutputConstraint a = f.constraint("(a|b)c");
  OutputConstraint b = a;
  a.advance(0);
  b.advance(1);
  std::vector<uint64_t> allowed;
  ASSERT_EQ(a.allowed(allowed), Next::kSample);
  EXPECT_EQ(ids_in(allowed, 5), (std::vector<int32_t>{4}));
  ASSERT_EQ(b.allowed(allowed), Next::kSample);
  EXPECT_EQ(ids_in(allowed, 5), (std::vector<int32_t>{4}));
  a.advance(4);
  EXPECT_TRUE(a.complete());
  EXPECT_FALSE(b.complete());
  EXPECT_DEATH(b.advance(1), "outside the mask");
}

}  // namespace
}  // namespace strata::engine

// ByteDfa (src/grammar/byte_dfa.h): every live state can still finish (states that cannot are
// merged into the dead one), bytes no edge tells apart share a class, and the state bound holds.

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "grammar/byte_dfa.h"
#include "grammar/regex.h"
#include "tests/grammar/dfa_sampling.h"

namespace strata::grammar {
namespace {

ByteDfa dfa_of(const std::string& pattern, int32_t max_states = 1 << 16) {
  Result<Nfa> nfa = compile_regex(pattern);
  EXPECT_TRUE(nfa.ok()) << nfa.status().message();
  Result<ByteDfa> dfa = ByteDfa::build(*nfa, max_states);
  EXPECT_TRUE(dfa.ok()) << dfa.status().message();
  return std::move(dfa).value();
}

TEST(ByteDfaTest, EveryLiveStateCanStillFinish) {
  for (const char* pattern : {"ab(c|d)*e", "[a-z]{2,5}x|y", "(\"[^\"]*\",)*\"[^\"]*\""}) {
    const ByteDfa dfa = dfa_of(pattern);
    const std::vector<int32_t> far = distances_to_accept(dfa);
    for (int32_t s = 1; s < dfa.num_states(); ++s) {
      // Unreachable states may exist (built, then bypassed); a reachable live one must finish.
      bool reached = s == dfa.start();
      for (int32_t p = 1; p < dfa.num_states() && !reached; ++p) {
        for (int b = 0; b < 256; ++b) reached |= dfa.next(p, static_cast<uint8_t>(b)) == s;
      }
      if (reached) {
        EXPECT_LT(far[static_cast<size_t>(s)], std::numeric_limits<int32_t>::max())
            << pattern << " state " << s;
      }
    }
    EXPECT_EQ(dfa.walk(dfa.start(), "#"), ByteDfa::kDead);
  }
  // A prefix that can never finish is dead at once, not at the end.
  const ByteDfa dfa = dfa_of("ab|ac");
  EXPECT_EQ(dfa.walk(dfa.start(), "ad"), ByteDfa::kDead);
  EXPECT_NE(dfa.walk(dfa.start(), "a"), ByteDfa::kDead);
  EXPECT_FALSE(dfa.accepting(dfa.walk(dfa.start(), "a")));
  EXPECT_TRUE(dfa.matches("ac"));
}

TEST(ByteDfaTest, BytesNoEdgeTellsApartShareAClass) {
  EXPECT_EQ(dfa_of("a").num_classes(), 3) << "below 'a', 'a', above it";
  EXPECT_LE(dfa_of("[0-9]+(\\.[0-9]+)?").num_classes(), 6);
}

TEST(ByteDfaTest, TheEmptyPatternMatchesOnlyTheEmptyString) {
  const ByteDfa dfa = dfa_of("");
  EXPECT_TRUE(dfa.matches(""));
  EXPECT_EQ(dfa.walk(dfa.start(), "a"), ByteDfa::kDead);
}

TEST(ByteDfaTest, TheStateBoundHolds) {
  const Result<Nfa> nfa = compile_regex("(a|b)*a(a|b){12}");  // 2^13 states deterministic
  ASSERT_TRUE(nfa.ok());
  EXPECT_EQ(ByteDfa::build(*nfa, 1000).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(ByteDfa::build(*nfa, 1 << 15).ok());
}

}  // namespace
}  // namespace strata::grammar

// The regex dialect (src/grammar/regex.h) compiled to a ByteDfa agrees with PCRE2 on thousands of
// strings per pattern: random ones over the pattern's alphabet, strings the DFA generates (each
// must match PCRE2 too) and one-character mutations of them; every construct outside the dialect
// is refused with its offset, and the limits hold.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/regex.h"
#include "tests/grammar/dfa_sampling.h"
#include "tests/grammar/pcre_reference.h"

namespace strata::grammar {
namespace {

ByteDfa dfa_of(const std::string& pattern) {
  Result<Nfa> nfa = compile_regex(pattern);
  EXPECT_TRUE(nfa.ok()) << pattern << ": " << nfa.status().message();
  Result<ByteDfa> dfa = ByteDfa::build(*nfa);
  EXPECT_TRUE(dfa.ok()) << pattern << ": " << dfa.status().message();
  return std::move(dfa).value();
}

// Characters the random strings are drawn from: ASCII that the patterns use and some that they
// do not, and multi-byte UTF-8.
const std::vector<std::string>& alphabet() {
  static const std::vector<std::string> a = {"a",
                                             "b",
                                             "c",
                                             "x",
                                             "z",
                                             "A",
                                             "Z",
                                             "0",
                                             "1",
                                             "5",
                                             "9",
                                             "_",
                                             "-",
                                             ".",
                                             ",",
                                             ":",
                                             " ",
                                             "\n",
                                             "\t",
                                             "\"",
                                             "\\",
                                             "{",
                                             "}",
                                             "[",
                                             "]",
                                             "/",
                                             "e",
                                             "E",
                                             "+",
                                             "@",
                                             "\xC3\xA9" /* é */,
                                             "\xE2\x82\xAC" /* € */,
                                             "\xF0\x9F\x98\x80" /* 😀 */,
                                             "\xCE\xB1" /* α */};
  return a;
}

const char* const kPatterns[] = {
    "abc",
    "a|b|",
    "(ab|cd)*e",
    "[a-c]+x?",
    "[^a-c]{2,4}",
    "\\d{3}-\\d{2}",
    "\\w+@\\w+\\.(com|org)",
    "\\s*[+-]?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?",
    "\"([^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4})*\"",
    ".{0,3}z",
    "(?:a|\\xE9|\\u20AC){1,3}",
    "[\\u00e0-\\u00ff\\u03b1]+",
    "[^\\x00-\\x7f]+",
    "\\{\"a\":(true|false|null)(,\"b\":\\[[0-9](,[0-9]){0,2}\\])?\\}",
    "(a{2}){2,}b{0,1}",
    "[\\-\\]\\\\a]+",
    "\\D\\W\\S",
};

TEST(RegexTest, AgreesWithPcre2OnRandomGeneratedAndMutatedStrings) {
  std::mt19937 rng(11);
  for (const char* pattern : kPatterns) {
    const ByteDfa dfa = dfa_of(pattern);
    const PcreReference ref(pattern);
    int matched = 0;
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) s += alphabet()[rng() % alphabet().size()];
      ASSERT_EQ(dfa.matches(s), ref.matches(s)) << pattern << " on \"" << s << "\"";
      matched += dfa.matches(s);
    }
    for (int i = 0; i < 500; ++i) {
      const std::string s = sample_match(dfa, rng, 40);
      ASSERT_TRUE(ref.matches(s)) << pattern << " generated \"" << s << "\"";
      ++matched;
      for (const std::string& m : mutations(s, alphabet(), rng)) {
        ASSERT_EQ(dfa.matches(m), ref.matches(m)) << pattern << " on \"" << m << "\"";
      }
    }
    EXPECT_GT(matched, 0) << pattern;
  }
}

TEST(RegexTest, InvalidUtf8NeverMatches) {
  const ByteDfa any = dfa_of(".*");
  EXPECT_TRUE(any.matches("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(any.matches("\xC3"));              // truncated
  EXPECT_FALSE(any.matches("\xC0\xAF"));          // overlong
  EXPECT_FALSE(any.matches("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(any.matches("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(any.matches("a\nb")) << "'.' does not match a newline";
  const ByteDfa neg = dfa_of("[^a]*");
  EXPECT_TRUE(neg.matches("\n\xE2\x82\xAC"));
  EXPECT_FALSE(neg.matches("\xFF"));
}

TEST(RegexTest, RefusesWhatTheDialectDoesNotHaveWithItsOffset) {
  const std::pair<const char*, const char*> cases[] = {
      {"a*?", "quantifier after a quantifier"},
      {"a++", "quantifier after a quantifier"},
      {"^a", "anchors"},
      {"a$", "anchors"},
      {"(?=a)", "only (?:...) groups"},
      {"(?<n>a)", "only (?:...) groups"},
      {"\\1", "unsupported escape"},
      {"\\b", "unsupported escape"},
      {"[[:alpha:]]", "unescaped ']'"},
      {"(a", "without its ')'"},
      {"a)", "unmatched ')'"},
      {"[a", "without its ']'"},
      {"*", "nothing to repeat"},
      {"a{2,1}", "m < n"},
      {"a{", "repetition"},
      {"}", "unescaped '}'"},
      {"[b-a]", "out of order"},
      {"\\xZZ", "hex digits"},
      {"\\ud800", "surrogate"},
      {"\xC3(", "invalid UTF-8"},
  };
  for (const auto& [pattern, why] : cases) {
    const Result<Nfa> r = compile_regex(pattern);
    ASSERT_FALSE(r.ok()) << pattern;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << pattern;
    EXPECT_NE(r.status().message().find(why), std::string::npos)
        << pattern << ": " << r.status().message();
    EXPECT_NE(r.status().message().find("offset"), std::string::npos) << r.status().message();
  }
}

TEST(RegexTest, LimitsAreEnforced) {
  EXPECT_EQ(compile_regex("a{1001}").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(compile_regex("a{1000}").ok());
  EXPECT_EQ(compile_regex("((a{1000}){1000}){2}").status().code(), StatusCode::kResourceExhausted);
  std::string deep(300, '(');
  deep += std::string(300, ')');
  EXPECT_EQ(compile_regex(deep).status().code(), StatusCode::kInvalidArgument) << "nesting bound";
  const Result<Nfa> nfa = compile_regex("[a-z]{0,200}x[a-z]{0,200}");
  ASSERT_TRUE(nfa.ok());
  EXPECT_EQ(ByteDfa::build(*nfa, 50).status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace strata::grammar

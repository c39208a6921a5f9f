// EBNF grammars (src/grammar/ebnf.h, ebnf_nfa.h): the GBNF parser on valid and invalid text
// (errors at their line and column), the automaton against a backtracking reference over the
// parsed grammar with recursion cut at the same depth (thousands of generated, sampled, mutated
// and random strings per grammar), exact left recursion, the depth bound, the limits, and every
// mask step of a small grammar against a brute-force walk of the vocabulary.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/ebnf.h"
#include "grammar/ebnf_nfa.h"
#include "grammar/grammar_compiler.h"
#include "grammar/token_masker.h"
#include "tests/grammar/dfa_sampling.h"
#include "tests/grammar/ebnf_reference.h"

namespace strata::grammar {
namespace {

using Kind = EbnfExpr::Kind;

// JSON (RFC 8259) in GBNF, whitespace after each token.
constexpr const char* kJsonGrammar = R"g(# JSON
root    ::= ws value
value   ::= ( object | array | string | number | "true" | "false" | "null" ) ws
object  ::= "{" ws ( member ( "," ws member )* )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( "," ws value )* )? "]"
string  ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,2} )?
ws      ::= [ \t\n]*
)g";

constexpr const char* kArithmetic = R"g(
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)g";

EbnfGrammar parsed(const std::string& text) {
  Result<EbnfGrammar> g = parse_ebnf(text);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << text;
  return g.ok() ? std::move(g).value() : EbnfGrammar{};
}

std::string parse_error(const std::string& text) {
  Result<EbnfGrammar> g = parse_ebnf(text);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? std::string() : g.status().message();
}

ByteDfa dfa_of(const std::string& text, int32_t depth) {
  EbnfLimits limits;
  limits.max_depth = depth;
  Result<Nfa> nfa = compile_ebnf(text, {}, limits, 1 << 20);
  EXPECT_TRUE(nfa.ok()) << nfa.status().message();
  Result<ByteDfa> dfa = ByteDfa::build(*nfa, 1 << 18);
  EXPECT_TRUE(dfa.ok()) << dfa.status().message();
  return std::move(dfa).value();
}

TEST(EbnfParserTest, ReadsRulesLiteralsClassesGroupsAndRepetitions) {
  EbnfGrammar g = parsed(R"g(
# a comment before the first rule
root ::= greeting ( " " name ){1,3} "!"? tail   # and after one
greeting ::= "hi" | "h\u00e9llo" | "\x41\n\"\\"
name ::= [A-Z] [a-z0-9_-]* | [^"\\] | .
tail ::=
  | "." tail
)g");
  ASSERT_EQ(g.names.size(), 4u);
  EXPECT_EQ(g.names[static_cast<size_t>(g.root)], "root");
  const EbnfExpr& root = g.rules[static_cast<size_t>(g.root)];
  ASSERT_EQ(root.kind, Kind::kConcat);
  ASSERT_EQ(root.items.size(), 4u);
  EXPECT_EQ(root.items[0].kind, Kind::kRule);
  EXPECT_EQ(root.items[1].kind, Kind::kRepeat);
  EXPECT_EQ(root.items[1].min, 1);
  EXPECT_EQ(root.items[1].max, 3);
  EXPECT_EQ(root.items[2].kind, Kind::kRepeat);
  EXPECT_EQ(root.items[2].max, 1);
  const EbnfExpr& greeting = g.rules[1];
  ASSERT_EQ(greeting.kind, Kind::kAlt);
  EXPECT_EQ(greeting.items[1].bytes, "h\xC3\xA9llo");
  EXPECT_EQ(greeting.items[2].bytes, "A\n\"\\");
  const EbnfExpr& name = g.rules[2];
  ASSERT_EQ(name.kind, Kind::kAlt);
  EXPECT_TRUE(name.items[1].set.contains('a'));
  EXPECT_FALSE(name.items[1].set.contains('"'));
  EXPECT_FALSE(name.items[1].set.contains('\\'));
  EXPECT_TRUE(name.items[2].set.contains('\n')) << "'.' is any code point, newline included";
  const EbnfExpr& tail = g.rules[3];
  ASSERT_EQ(tail.kind, Kind::kAlt);
  EXPECT_TRUE(tail.items[0].kind == Kind::kConcat && tail.items[0].items.empty())
      << "an empty alternative";
  // Newlines are spaces inside a rule; the next `name ::=` ends it.
  EbnfGrammar two = parsed("root ::= \"a\"\n  \"b\"\nb ::= \"c\"");
  EXPECT_EQ(two.rules[0].items.size(), 2u);
}

TEST(EbnfParserTest, ErrorsNameTheLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"root ::= \"abc", "line 1, column 10: a '\"' without its closing"},
      {"root ::= foo", "line 1, column 10: rule 'foo' is not defined"},
      {"\nroot ::= \"a\"\nroot ::= \"b\"", "line 3, column 1: rule 'root' is defined twice"},
      {"a ::= \"x\"", "no 'root' rule"},
      {"root ::= ( \"a\" ", "line 1, column 10: a '(' without its ')'"},
      {"root ::= \"a\"{3,1}", "line 1, column 13: a repetition {m,n} with n < m"},
      {"root ::= \"\\q\"", "line 1, column 11: an unknown escape '\\q'"},
      {"root := \"a\"", "line 1, column 6: expected '::='"},
      {"root ::= \"a\" )", "line 1, column 14: an unmatched ')'"},
      {"root ::= *", "line 1, column 10: nothing to repeat"},
      {"root ::= [z-a]", "line 1, column 13: a class range out of order"},
      {"root ::= []", "line 1, column 10: a class that matches nothing"},
      {"root ::= \"a\"{1001}", "line 1, column 14: a repetition count above 1000"},
      {"root ::= item+\nitem ::= \"a\" |\n   \"b\" ]", "line 3, column 8: expected a literal"},
      {"root ::= \"\xC3\xA9\" \"\\u12\"", "line 1, column 19: a hex escape needs 4 hex digits"},
      {"root ::= \"\\uD800\"", "line 1, column 11: an escape that is not a Unicode scalar"},
      {"root ::= \"a\" ::= \"b\"", "line 1, column 14: '::=' without a rule name"},
      {"root ::= \"\xFF\"", "line 1, column 11: invalid UTF-8"},
      {"root ::= \"a\"*****", "line 1, column 17: more than 4 quantifiers"},
  };
  for (const auto& [text, want] : cases) {
    const std::string got = parse_error(text);
    EXPECT_NE(got.find(want), std::string::npos) << text << "\n got: " << got;
  }
  EXPECT_NE(parse_error("root ::= " + std::string(120, '(') + std::string(120, ')'))
                .find("nested more than"),
            std::string::npos);
}

TEST(EbnfCompileTest, EmptyLanguagesAreRefusedWithTheReason) {
  for (const char* text : {"root ::= \"(\" root \")\"", "root ::= a\na ::= a \"x\"",
                           "root ::= \"x\" b\nb ::= \"y\" b"}) {
    Result<Nfa> nfa = compile_ebnf(text, {}, {}, 1 << 20);
    ASSERT_FALSE(nfa.ok()) << text;
    EXPECT_EQ(nfa.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(nfa.status().message().find("language is empty"), std::string::npos)
        << nfa.status().message();
  }
}

// The automaton and the reference agree on what the grammar generates, on what the automaton
// samples, on one-character mutations of both and on random strings over the grammar's alphabet.
void expect_agreement(const std::string& text, int32_t depth,
                      const std::vector<std::string>& alphabet, uint32_t seed) {
  EbnfGrammar g = parsed(text);
  rewrite_left_recursion(g);
  EbnfReference ref(g, depth);
  const ByteDfa dfa = dfa_of(text, depth);
  ASSERT_NE(dfa.start(), ByteDfa::kDead) << text;
  std::mt19937 rng(seed);
  const std::vector<int32_t> far = distances_to_accept(dfa);
  int generated = 0, accepted = 0, checked = 0;
  const auto agree = [&](const std::string& s) {
    ++checked;
    const bool want = ref.matches(s);
    accepted += want ? 1 : 0;
    ASSERT_EQ(dfa.matches(s), want) << text << "\n on: '" << s << "'";
  };
  for (int i = 0; i < 400; ++i) {
    std::string s;
    if (ref.generate(rng, 40, s)) {
      ++generated;
      ASSERT_TRUE(dfa.matches(s)) << text << "\n generated: '" << s << "'";
      for (const std::string& m : mutations(s, alphabet, rng)) agree(m);
    }
    const std::string sampled = sample_match(dfa, rng, 30, far);
    ASSERT_TRUE(ref.matches(sampled)) << text << "\n sampled: '" << sampled << "'";
    for (const std::string& m : mutations(sampled, alphabet, rng)) agree(m);
    std::string random;
    for (size_t n = rng() % 12; n > 0; --n) random += alphabet[rng() % alphabet.size()];
    agree(random);
  }
  EXPECT_GT(generated, 200) << text;
  EXPECT_GT(checked, 1500) << text;
  EXPECT_GT(accepted, 50) << text << ": mutations should sometimes stay in the language";
}

TEST(EbnfAutomatonTest, AgreesWithTheReferenceOnRecursiveGrammars) {
  expect_agreement(kArithmetic, 2, {"1", "2", "0", "+", "-", "*", "/", "(", ")", " "}, 1);
  expect_agreement(R"g(
root   ::= value
value  ::= object | array | "true" | "null" | [0-9]{1,2} | "\"" [a-c]{0,2} "\""
object ::= "{" ( pair ("," pair)* )? "}"
pair   ::= "\"" [a-c]+ "\"" ":" value
array  ::= "[" ( value ("," value)* )? "]"
)g",
                   3, {"{", "}", "[", "]", ",", ":", "\"", "a", "b", "1", "true", "null"}, 2);
  // Mutual recursion with an optional, and indirect left recursion (bounded, not rewritten).
  expect_agreement("root ::= a\na ::= \"(\" b \")\" | \"x\"\nb ::= a a? | \"\"", 3, {"(", ")", "x"},
                   3);
  expect_agreement("root ::= a\na ::= b \"x\" | \"y\"\nb ::= a \"z\" | \"w\"", 3,
                   {"x", "y", "z", "w"}, 4);
  // Tail calls: a chain of rules entered in tail position loops back (s -> t -> s), a call with
  // something left to do starts a new chain and counts; `?` at the end is a tail position.
  expect_agreement("root ::= s\ns ::= \"a\" t | \"x\"\nt ::= \"(\" s \")\" s | \"y\" s?", 2,
                   {"a", "x", "y", "(", ")"}, 8);
  expect_agreement("root ::= item (\",\" root)?\nitem ::= [0-9] | \"[\" root \"]\" | \"-\" item", 2,
                   {"1", ",", "[", "]", "-"}, 9);
}

TEST(EbnfAutomatonTest, AgreesWithTheReferenceOnRegularGrammars) {
  expect_agreement(
      R"g(
root  ::= pair (" " pair)*
pair  ::= name ("=" value)?
name  ::= [a-zA-Z_] [a-zA-Z0-9_-]{0,3}
value ::= "\"" [^"\\]{0,3} "\"" | "é"+ | "\U0001F600" | .
)g",
      0,
      {"a", "Z", "_", "-", "1", "=", "\"", " ", "\\", "\xC3\xA9", "\xF0\x9F\x98\x80", "\xC3", "\n"},
      5);
  // Left recursion, rewritten exactly: `list ::= list "," item | item`.
  expect_agreement("root ::= list \";\"\nlist ::= list \",\" item | item\nitem ::= \"x\" | \"yy\"",
                   0, {"x", "y", ",", ";"}, 6);
  expect_agreement("root ::= a\na ::= a \"b\" | a \"c\" | \"d\" | a", 0, {"b", "c", "d"}, 7);
}

TEST(EbnfAutomatonTest, LeftRecursionIsExactAtAnyLength) {
  const ByteDfa dfa = dfa_of("root ::= list\nlist ::= list \",\" item | item\nitem ::= [0-9]+", 1);
  std::string list = "1";
  for (int i = 0; i < 500; ++i) list += "," + std::to_string(i);
  EXPECT_TRUE(dfa.matches(list));
  EXPECT_FALSE(dfa.matches(list + ","));
  EXPECT_FALSE(dfa.matches(",1"));
}

TEST(EbnfAutomatonTest, RecursionIsCutAtTheDepthBound) {
  for (int32_t depth = 0; depth <= 5; ++depth) {
    const ByteDfa dfa = dfa_of(kArithmetic, depth);
    std::string within = "1", deeper;
    for (int32_t i = 0; i < depth; ++i) within = "(" + within + ")";
    deeper = "(" + within + ")";
    EXPECT_TRUE(dfa.matches(within)) << depth;
    EXPECT_FALSE(dfa.matches(deeper)) << depth;
    // The cut prefix is still a valid prefix of the grammar, but no longer of the automaton:
    // it can never be produced.
    EXPECT_EQ(dfa.walk(dfa.start(), std::string(static_cast<size_t>(depth) + 1, '(')),
              ByteDfa::kDead)
        << depth;
  }
  // JSON nested to the depth is built, and every text it samples parses as JSON.
  const ByteDfa json = dfa_of(kJsonGrammar, 6);
  EXPECT_TRUE(json.matches(R"g({"a": [1, {"b": [true, [null, -2.5e3]]}], "c": "\u00e9\n"} )g"));
  EXPECT_TRUE(json.matches("[[[[[[1]]]]]]"));
  EXPECT_FALSE(json.matches("[[[[[[[1]]]]]]]"));
  EXPECT_FALSE(json.matches("{\"a\":}"));
  std::mt19937 rng(11);
  const std::vector<int32_t> far = distances_to_accept(json);
  for (int i = 0; i < 300; ++i) {
    const std::string s = sample_match(json, rng, 60, far);
    EXPECT_TRUE(nlohmann::json::accept(s)) << s;
  }
}

TEST(EbnfCompileTest, BlowUpsAreRefusedQuicklyWithTheReason) {
  // An exponential expansion of rules (2^30 copies), one of rules that match only "" (no
  // states, only steps), and a regular language whose DFA is exponential.
  std::string doubling = "root ::= r0\n", empty = "root ::= e0\n";
  for (int i = 0; i < 30; ++i) {
    doubling += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " r" +
                std::to_string(i + 1) + "\n";
    empty += "e" + std::to_string(i) + " ::= e" + std::to_string(i + 1) + " e" +
             std::to_string(i + 1) + "\n";
  }
  doubling += "r30 ::= \"a\"\n";
  empty += "e30 ::= \"\"\n";
  GrammarLimits limits;
  GrammarCompiler compiler([] { return std::vector<std::string>{"a", "b"}; }, limits);
  for (const std::string& text :
       {doubling, empty, std::string("root ::= [ab]* \"a\" [ab]{20}"), std::string(kJsonGrammar)}) {
    const auto start = std::chrono::steady_clock::now();
    auto g = compiler.compile({StructuredOutput::Kind::kGrammar, text});
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 5.0) << text;
    if (text == kJsonGrammar) {
      EXPECT_TRUE(g.ok()) << g.status().message();
      continue;
    }
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(g.status().message().find("passes"), std::string::npos) << g.status().message();
    EXPECT_NE(g.status().message().find("even with recursion cut at depth 0"), std::string::npos)
        << g.status().message();
  }
  // Rules nested deeper than the builder recurses.
  std::string chain = "root ::= c0\n";
  for (int i = 0; i < 2000; ++i) {
    chain += "c" + std::to_string(i) + " ::= \"x\" c" + std::to_string(i + 1) + "\n";
  }
  chain += "c2000 ::= \"y\"\n";
  auto deep = compiler.compile({StructuredOutput::Kind::kGrammar, chain});
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nested more than"), std::string::npos)
      << deep.status().message();
  // Fewer rules, each nesting groups 90 deep: the expansion's nesting is bounded on its own.
  std::string groups = "root ::= g0\n";
  for (int i = 0; i < 200; ++i) {
    std::string body = "g" + std::to_string(i + 1);
    for (int k = 0; k < 90; ++k) body = "(\"x\" | \"z\" " + body + ")";
    groups += "g" + std::to_string(i) + " ::= " + body + "\n";
  }
  groups += "g200 ::= \"y\"\n";
  auto nested = compiler.compile({StructuredOutput::Kind::kGrammar, groups});
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("nested more than 1000 deep"), std::string::npos)
      << nested.status().message();
}

// A grammar whose automaton at the depth bound would pass the DFA's bound is built at the
// deepest depth that fits; one without recursion at depth 0, exactly.
TEST(EbnfCompileTest, TheDepthIsTheDeepestThatFitsTheBounds) {
  // Four ways back from each level of parentheses: 4^depth contexts to tell apart.
  const std::string text = R"g(
root    ::= expr
expr    ::= expr ("+" | "-") term | term
term    ::= power (("*" | "/") power)*
power   ::= unary ("^" unary)?
unary   ::= "-" unary | primary
primary ::= [0-9]+ | "(" expr ")" | [a-z]+ "(" (expr ("," expr)*)? ")"
)g";
  for (const int32_t max_states : {1 << 16, 1 << 12}) {
    GrammarLimits limits;
    limits.max_dfa_states = max_states;
    limits.ebnf.max_depth = 8;
    GrammarCompiler compiler([] { return std::vector<std::string>{"a"}; }, limits);
    auto g = compiler.compile({StructuredOutput::Kind::kGrammar, text});
    ASSERT_TRUE(g.ok()) << g.status().message();
    const int32_t depth = (*g)->grammar_depth;
    EXPECT_GE(depth, 1);
    EXPECT_LT(depth, 8);
    EXPECT_LE((*g)->dfa->num_states(), max_states);
    const std::string within = std::string(static_cast<size_t>(depth), '(') + "-1" +
                               std::string(static_cast<size_t>(depth), ')');
    EXPECT_TRUE((*g)->dfa->matches(within)) << depth;
    EXPECT_FALSE((*g)->dfa->matches("(" + within + ")")) << depth;
    EXPECT_TRUE((*g)->dfa->matches("----1^-2+f(3,--4)")) << "unary minus loops: exact";
    EbnfLimits one_deeper;
    one_deeper.max_depth = depth + 1;
    Result<Nfa> nfa = compile_ebnf(text, {}, one_deeper, 1 << 20);
    const bool fits = nfa.ok() && ByteDfa::build(*nfa, max_states).ok();
    EXPECT_FALSE(fits) << "depth " << depth + 1 << " fits too";
  }
  GrammarCompiler compiler([] { return std::vector<std::string>{"a"}; }, GrammarLimits{});
  auto json = compiler.compile({StructuredOutput::Kind::kGrammar, kJsonGrammar});
  ASSERT_TRUE(json.ok());
  EXPECT_EQ((*json)->grammar_depth, 6) << "the default";
  auto flat = compiler.compile({StructuredOutput::Kind::kGrammar, "root ::= [a-z]+ (\",\" root)?"});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ((*flat)->grammar_depth, 0) << "tail recursion loops: nothing to cut";
  std::string long_list = "a";
  for (int i = 0; i < 300; ++i) long_list += ",b";
  EXPECT_TRUE((*flat)->dfa->matches(long_list));
}

TEST(EbnfCompileTest, TheCompilerBuildsAGrammarWithMarkersAndCachesIt) {
  GrammarCompiler compiler([] { return std::vector<std::string>{"a", "b"}; }, GrammarLimits{});
  StructuredOutput c{StructuredOutput::Kind::kGrammar, kArithmetic};
  c.prefix = "<e>";
  c.suffix = "</e>";
  c.separator = ";";
  c.repeated = true;
  auto g = compiler.compile(c);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE((*g)->dfa->matches("<e>1+2</e>;<e>(3*-4)</e>"));
  EXPECT_FALSE((*g)->dfa->matches("<e>1+2</e>;"));
  EXPECT_EQ(*compiler.compile(c), *g) << "cached";
  EXPECT_EQ(compiler.num_compiled(), 1);
  auto bad = compiler.compile({StructuredOutput::Kind::kGrammar, "root ::= nope"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("line 1, column 10"), std::string::npos);
}

// The grammars of docs/benchmarks.md compile at the default depth, and what they sample the
// reference accepts.
TEST(EbnfCompileTest, TheBenchmarkGrammarsCompileAtTheDefaultDepth) {
  const std::filesystem::path dir = std::filesystem::path(STRATA_TEST_DATA_DIR) / "grammar/gbnf";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".gbnf") continue;
    ++count;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    GrammarCompiler compiler([] { return std::vector<std::string>{"a"}; }, GrammarLimits{});
    auto g = compiler.compile({StructuredOutput::Kind::kGrammar, text});
    ASSERT_TRUE(g.ok()) << entry.path() << ": " << g.status().message();
    EbnfGrammar grammar = parsed(text);
    rewrite_left_recursion(grammar);
    EbnfReference ref(grammar, EbnfLimits{}.max_depth);
    std::mt19937 rng(23);
    const ByteDfa& dfa = *(*g)->dfa;
    const std::vector<int32_t> far = distances_to_accept(dfa);
    for (int i = 0; i < 30; ++i) {
      const std::string s = sample_match(dfa, rng, 40, far);
      EXPECT_TRUE(ref.matches(s)) << entry.path() << ": '" << s << "'";
    }
  }
  EXPECT_EQ(count, 4);
}

// Every step's mask allows exactly the tokens whose bytes keep a valid prefix.
TEST(EbnfMaskTest, EveryStepAllowsExactlyTheTokensThatKeepAValidPrefix) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"((", "))", "()", "1+", "+(", "12", "3)", "*-", "-(", ")*", "(1)", "99",
                        "1+2", ")+(", "--", "(-", "x", "ab"}) {
    vocab.emplace_back(t);
  }
  vocab.emplace_back();  // a special token: no bytes
  GrammarLimits limits;
  limits.ebnf.max_depth = 3;
  GrammarCompiler compiler([vocab] { return vocab; }, limits);
  auto g = compiler.compile({StructuredOutput::Kind::kGrammar, kArithmetic});
  ASSERT_TRUE(g.ok()) << g.status().message();
  const ByteDfa& dfa = *(*g)->dfa;
  TokenMasker masker((*g)->dfa, compiler.vocab(), (*g)->masks, (*g)->mask_keys);
  EbnfGrammar grammar = parsed(kArithmetic);
  EbnfReference ref(grammar, 3);
  std::mt19937 rng(17);
  for (int walk = 0; walk < 60; ++walk) {
    const std::string target = sample_match(dfa, rng, 24);
    ASSERT_TRUE(ref.matches(target)) << target;
    int32_t state = dfa.start();
    for (size_t i = 0; i <= target.size(); ++i) {
      const TokenMask& m = *masker.mask(state);
      for (int32_t id = 0; id < compiler.vocab()->vocab_size(); ++id) {
        const std::string& bytes = compiler.vocab()->bytes(id);
        const bool want = !bytes.empty() && dfa.walk(state, bytes) != ByteDfa::kDead;
        ASSERT_EQ(m.allows(id), want) << "token '" << bytes << "' after '" << target.substr(0, i);
      }
      if (i < target.size()) state = dfa.next(state, static_cast<uint8_t>(target[i]));
    }
    EXPECT_TRUE(dfa.accepting(state));
  }
}

}  // namespace
}  // namespace strata::grammar

#pragma once
// EBNF grammars in GBNF, llama.cpp's dialect (vLLM's guided_grammar takes the same text through
// xgrammar and llguidance): parsed into an EbnfGrammar, a tree per rule, which ebnf_nfa.h builds
// into the byte NFA the rest of the grammar layer uses (docs/grammar.md, "EBNF grammars").
//
//   root ::= "(" items? ")"        a rule: a name, ::=, alternatives; the start rule is `root`
//   items ::= item ("," item)*     names are letters, digits, '-' and '_'
//   item ::= [a-z0-9_]+ | "\"" [^"\\]* "\"" | items-in-parens
//   items-in-parens ::= "(" items ")" | .    # a comment runs to the end of the line
//
//   "..."        a literal (UTF-8); escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, and any
//                other ASCII punctuation after '\' stands for itself
//   [...] [^...] a class of code points: members and ranges a-z, the same escapes; a negated class
//                is its complement among all code points
//   .            any code point (newline included, as in llama.cpp)
//   ( ... )      a group; a | b alternation (an empty alternative is the empty string)
//   * + ?        repetition; {m} {m,} {m,n} with m <= n <= RegexLimits::max_repeat
//
// A rule's body runs to where the next `name ::=` starts, so newlines are spaces everywhere (a
// superset of llama.cpp, which ends a rule at a newline outside parentheses). Errors name the
// line and column: a syntax error, a rule defined twice, a reference to an undefined rule, no
// `root` rule. Thread-safe (pure functions).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/utf8_ranges.h"

namespace strata::grammar {

struct EbnfExpr {
  enum class Kind {
    kBytes,   // bytes: a literal's UTF-8 (empty: the empty string)
    kSet,     // set: one code point of it
    kConcat,  // items in a row
    kAlt,     // one of items; none at all is the empty language
    kRepeat,  // items[0], min to max times (max -1: unbounded)
    kRule,    // rule: a reference to the grammar's rules[rule]
  };
  Kind kind = Kind::kConcat;
  std::string bytes;
  CodePointSet set;
  std::vector<EbnfExpr> items;
  int32_t min = 0, max = 0;
  int32_t rule = -1;

  bool operator==(const EbnfExpr& o) const;
};

struct EbnfGrammar {
  std::vector<std::string> names;  // [rule]
  std::vector<EbnfExpr> rules;     // [rule]: its body
  int32_t root = -1;               // the index of `root`
};

struct EbnfLimits {
  int64_t max_grammar_bytes = int64_t{1} << 20;  // the text's length
  int32_t max_repeat = 1000;                     // the largest m or n of {m,n}
  int32_t max_rules = 1 << 14;
  // Nesting is expanded to this depth: a rule may be entered (other than by a loop in tail
  // position) at most max_depth times while it is already being expanded, so max_depth levels of
  // nested brackets in a JSON grammar; derivations that would go deeper are cut (ebnf_nfa.h).
  // compile_ebnf_dfa takes it as the most: the deepest that fits the automaton's bounds.
  int32_t max_depth = 6;
  int32_t max_open_rules = 1000;  // rules being expanded at once (the builder's recursion)
};

// InvalidArgument "grammar line L, column C: ..." for text outside the dialect, a rule defined
// twice, an undefined rule, no root; ResourceExhausted past limits.
Result<EbnfGrammar> parse_ebnf(std::string_view text, const EbnfLimits& limits = {});

// Rewrites each rule's direct left recursion, A ::= A x | A y | b | c, into the same language
// without it, A ::= (b | c) (x | y)*: exact, where bounded expansion would cut it at a depth.
// Left recursion through other rules is left as it is (bounded like any recursion).
void rewrite_left_recursion(EbnfGrammar& grammar);

// The rules whose language is empty however deep recursion may go (no derivation ends).
std::vector<bool> empty_rules(const EbnfGrammar& grammar);

}  // namespace strata::grammar

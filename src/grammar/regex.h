#pragma once
// Regex: the pattern language the grammar layer compiles into byte automata for constrained
// decoding (docs/grammar.md). A pattern always matches a whole output (implicitly anchored at both
// ends); it is parsed into a Thompson NFA over bytes, whose code points are UTF-8.
//
// The dialect (a subset of PCRE's, with the same meaning where they overlap):
//   literal       any code point but the metacharacters  \ . [ ] ( ) | * + ? { }  (UTF-8 input)
//   escapes       \\ \. \[ \] \( \) \| \* \+ \? \{ \} \/ \- \^ \$ \" (the character itself),
//                 \n \r \t \f \v, \xHH (a code point below 256), \uHHHH (a BMP code point),
//                 \d [0-9], \w [0-9A-Za-z_], \s [ \t\n\r\f\v], \D \W \S (their complements)
//   .             any code point but \n
//   [...] [^...]  a class of code points: members, ranges a-z (escapes allowed inside), \d \w \s;
//                 a negated class is its complement among all code points (U+0000..U+10FFFF
//                 but the surrogates)
//   (...) (?:...) a group (no captures are kept)
//   a|b           alternation
//   * + ?         greedy repetition; {n} {n,} {n,m} with n <= m <= RegexLimits::max_repeat
// Not accepted (InvalidArgument naming the offset): lazy or possessive quantifiers, anchors ^ $,
// backreferences, lookaround, named groups, flags, \b, POSIX classes, an empty class.
//
// Cost: the NFA has O(pattern length x repetition counts) states; compile_regex refuses one
// larger than RegexLimits::max_nfa_states (ResourceExhausted).

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::grammar {

struct RegexLimits {
  int32_t max_repeat = 1000;         // the largest n or m of {n,m}
  int64_t max_nfa_states = 1 << 20;  // the NFA's size bound
};

// A byte NFA: state 0 is the start; edges on a byte range [lo, hi] or epsilon.
struct Nfa {
  struct Edge {
    int32_t to = 0;
    uint8_t lo = 0, hi = 0;
    bool epsilon = false;
  };
  std::vector<std::vector<Edge>> edges;  // per state
  int32_t accept = 0;                    // the one accepting state
  int32_t num_states() const { return static_cast<int32_t>(edges.size()); }
};

// InvalidArgument (with the offset and what was expected) for a pattern outside the dialect.
Result<Nfa> compile_regex(std::string_view pattern, const RegexLimits& limits = {});

}  // namespace strata::grammar

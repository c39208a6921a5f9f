#pragma once
// An EBNF grammar (ebnf.h) built into the byte NFA that ByteDfa::build makes deterministic, so a
// grammar constraint reuses the DFA, the token masks and their caches unchanged
// (docs/grammar.md, "EBNF grammars").
//
// A regular grammar (no recursion) is built exactly: every rule reference is the rule's body,
// inlined. A recursive grammar's language is context-free, which no finite automaton holds; it is
// expanded to a bounded depth instead: a rule may be entered at most EbnfLimits::max_depth times
// while it is already being expanded, and an alternative that would go deeper is dropped. Every
// text of the result is a text of the grammar; texts that nest deeper are not in it. Direct left
// recursion is rewritten first (rewrite_left_recursion), so `list ::= list "," item | item` is
// exact at any length.
//
// `x (s x)*` in a sequence (a separated list, as in every JSON grammar) is built with x once and
// a loop back to it, not twice, so each level of a JSON grammar costs its rules once per place
// they recur (object member, array element), not once per mention.
//
// Cost: the NFA's size is the grammar's expanded size, up to max_nfa_states (ResourceExhausted);
// the expansion's work (nodes visited, which can pass the states for rules that match only the
// empty string) is bounded at 4x that.

#include <cstdint>
#include <string>

#include "core/status.h"
#include "grammar/ebnf.h"
#include "grammar/regex.h"

namespace strata::grammar {

// The NFA of `start`, an expression over the grammar's rules (a reference to its root, perhaps
// inside literal markers). ResourceExhausted past the limits.
Result<Nfa> ebnf_nfa(const EbnfGrammar& grammar, const EbnfExpr& start, const EbnfLimits& limits,
                     int64_t max_nfa_states);

// The whole path for a grammar text: parse, rewrite left recursion, refuse an empty language
// (a root no derivation ends), build the NFA of `start` (built by make_start from the root's
// index). Errors say which step refused it.
struct EbnfMarkers {
  std::string prefix, suffix, separator;
  bool repeated = false;
};
Result<Nfa> compile_ebnf(std::string_view text, const EbnfMarkers& markers,
                         const EbnfLimits& limits, int64_t max_nfa_states);

}  // namespace strata::grammar

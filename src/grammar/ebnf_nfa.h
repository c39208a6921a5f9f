#pragma once
// An EBNF grammar (ebnf.h) built into the byte NFA that ByteDfa::build makes deterministic, so a
// grammar constraint reuses the DFA, the token masks and their caches unchanged
// (docs/grammar.md, "EBNF grammars").
//
// A regular grammar (no recursion) is built exactly: every rule reference is the rule's body,
// inlined. Recursion in tail position is a loop, also exact: a reference that is the last thing
// its rule does, to a rule of the current tail chain (the rules entered in tail position since
// the last reference that had something left to do), goes back to that rule's entry, so
// `list ::= item ("," list)?` and `unary ::= "-" unary | atom` cost nothing per repetition.
// Direct left recursion is rewritten first (rewrite_left_recursion), so `list ::= list "," item
// | item` is exact too. What remains is nesting (a value inside an array, an expression inside
// parentheses): a context-free language, which no finite automaton holds. It is expanded to a
// bounded depth: any other reference enters its rule only while the rule is open at most
// EbnfLimits::max_depth times, and an alternative that would go deeper is dropped. Every text of
// the result is a text of the grammar; texts that nest deeper are not in it.
//
// `x (s x)*` in a sequence (a separated list, as in every JSON grammar) is built with x once and
// a loop back to it, not twice, so each level of a JSON grammar costs its rules once per place
// they recur (object member, array element), not once per mention.
//
// Cost: the NFA's size is the grammar's expanded size, up to max_nfa_states (ResourceExhausted):
// each level of nesting multiplies it by the number of places a level recurses into the next
// (2 for JSON: an object member, an array element). The expansion's work (nodes visited, which
// can pass the states for rules that match only the empty string) is bounded at 4x that, its
// recursion at 1,000 nested expressions.

#include <cstdint>
#include <string>

#include "core/status.h"
#include "grammar/byte_dfa.h"
#include "grammar/ebnf.h"
#include "grammar/regex.h"

namespace strata::grammar {

// The NFA of `start`, an expression over the grammar's rules (a reference to its root, perhaps
// inside literal markers). ResourceExhausted past the limits. *cut (if given): whether the depth
// bound dropped a derivation (false: the automaton is the grammar's whole language).
Result<Nfa> ebnf_nfa(const EbnfGrammar& grammar, const EbnfExpr& start, const EbnfLimits& limits,
                     int64_t max_nfa_states, bool* cut = nullptr);

// The whole path for a grammar text: parse, rewrite left recursion, refuse an empty language
// (a root no derivation ends), build the NFA of `start` (built by make_start from the root's
// index). Errors say which step refused it.
struct EbnfMarkers {
  std::string prefix, suffix, separator;
  bool repeated = false;
};
Result<Nfa> compile_ebnf(std::string_view text, const EbnfMarkers& markers,
                         const EbnfLimits& limits, int64_t max_nfa_states, bool* cut = nullptr);

// The grammar's DFA at the largest depth up to limits.max_depth whose automaton fits the bounds
// (max_nfa_states, max_dfa_states): depths 0, 1, ... are built in turn until one does not fit
// or nothing was cut, so the cost is about the kept automaton's plus one refused build. A
// grammar that does not fit even at depth 0 is ResourceExhausted, naming the bound.
struct EbnfDfa {
  ByteDfa dfa;
  int32_t depth = 0;  // the depth it was built at
  bool cut = false;   // whether that depth cut a derivation
};
Result<EbnfDfa> compile_ebnf_dfa(std::string_view text, const EbnfMarkers& markers,
                                 const EbnfLimits& limits, int64_t max_nfa_states,
                                 int32_t max_dfa_states);

}  // namespace strata::grammar

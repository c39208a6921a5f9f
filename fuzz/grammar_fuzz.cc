// libFuzzer target: the grammar layer's compilers (src/grammar) on arbitrary input. The first
// byte modulo 3 picks what the rest is: a regex (compile_regex, then ByteDfa::build), a JSON
// schema (json_schema_regex, then the same) or an EBNF grammar in GBNF (compile_ebnf: parse, left
// recursion rewritten, recursion expanded to depth 3, then ByteDfa::build), under small bounds so
// each input stays fast. A Status is
// the expected way to refuse input; a crash, a sanitizer report, or a built automaton that breaks
// its invariants (every live state reachable from the start can still reach acceptance; states
// of one liveness class indistinguishable within its depth) is a bug.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "grammar/byte_dfa.h"
#include "grammar/ebnf_nfa.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace {

using namespace strata::grammar;

constexpr int64_t kMaxNfaStates = 1 << 14;

void check_nfa(const Nfa& nfa) {
  STRATA_CHECK(nfa.accept >= 0 && nfa.accept < nfa.num_states(), "an accepting state in the NFA");
  const strata::Result<ByteDfa> dfa = ByteDfa::build(nfa, 1 << 12);
  if (!dfa.ok()) return;
  // Every state reachable from the start through live states can still reach acceptance.
  const auto n = static_cast<size_t>(dfa->num_states());
  std::vector<std::vector<int32_t>> into(n);
  std::vector<bool> reached(n, false);
  std::vector<int32_t> stack;
  if (dfa->start() != ByteDfa::kDead) {
    reached[static_cast<size_t>(dfa->start())] = true;
    stack.push_back(dfa->start());
  }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int b = 0; b < 256; ++b) {
      const int32_t to = dfa->next(s, static_cast<uint8_t>(b));
      if (to == ByteDfa::kDead) continue;
      into[static_cast<size_t>(to)].push_back(s);
      if (!reached[static_cast<size_t>(to)]) {
        reached[static_cast<size_t>(to)] = true;
        stack.push_back(to);
      }
    }
  }
  std::vector<bool> finishes(n, false);
  for (size_t s = 0; s < n; ++s) {
    if (reached[s] && dfa->accepting(static_cast<int32_t>(s))) {
      finishes[s] = true;
      stack.push_back(static_cast<int32_t>(s));
    }
  }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (const int32_t p : into[static_cast<size_t>(s)]) {
      if (!finishes[static_cast<size_t>(p)]) {
        finishes[static_cast<size_t>(p)] = true;
        stack.push_back(p);
      }
    }
  }
  for (size_t s = 0; s < n; ++s) {
    STRATA_CHECK(!reached[s] || finishes[s], "a live state from which no match can finish");
  }
  // Liveness classes at depth 2 (ByteDfa::liveness_classes): states of one class agree on
  // which bytes keep them live, and their successors on every byte share a class at depth 1.
  const std::vector<int32_t> two = dfa->liveness_classes(2);
  const std::vector<int32_t> one = dfa->liveness_classes(1);
  STRATA_CHECK(two.size() == n && one.size() == n && two[0] == 0, "classes of every state");
  std::vector<int32_t> first_of(n, -1);
  for (size_t s = 0; s < n; ++s) {
    int32_t& rep = first_of[static_cast<size_t>(two[s])];
    if (rep < 0) {
      rep = static_cast<int32_t>(s);
      continue;
    }
    for (int b = 0; b < 256; ++b) {
      const int32_t x = dfa->next(static_cast<int32_t>(s), static_cast<uint8_t>(b));
      const int32_t y = dfa->next(rep, static_cast<uint8_t>(b));
      STRATA_CHECK((x == ByteDfa::kDead) == (y == ByteDfa::kDead) &&
                       one[static_cast<size_t>(x)] == one[static_cast<size_t>(y)],
                   "two states of one liveness class that a byte tells apart");
    }
  }
}

void check_dfa(std::string_view pattern) {
  RegexLimits limits;
  limits.max_repeat = 64;
  limits.max_nfa_states = kMaxNfaStates;
  const strata::Result<Nfa> nfa = compile_regex(pattern, limits);
  if (nfa.ok()) check_nfa(*nfa);
}

void check_grammar(std::string_view text) {
  EbnfLimits limits;
  limits.max_repeat = 64;
  limits.max_depth = 3;
  limits.max_rules = 256;
  limits.max_open_rules = 64;
  const strata::Result<Nfa> nfa = compile_ebnf(text, {}, limits, kMaxNfaStates);
  if (nfa.ok()) check_nfa(*nfa);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 3 == 0) {
    check_dfa(rest);
    return 0;
  }
  if (data[0] % 3 == 2) {
    check_grammar(rest);
    return 0;
  }
  const nlohmann::json schema = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  JsonSchemaOptions options;
  options.max_regex_bytes = 1 << 14;
  const strata::Result<std::string> regex = json_schema_regex(schema, options);
  if (regex.ok()) check_dfa(*regex);
  return 0;
}

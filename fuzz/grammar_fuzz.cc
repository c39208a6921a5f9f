// libFuzzer target: the grammar layer's compilers (src/grammar) on arbitrary input. The first
// byte picks what the rest is: a regex (compile_regex, then ByteDfa::build) or a JSON schema
// (json_schema_regex, then the same), under small bounds so each input stays fast. A Status is
// the expected way to refuse input; a crash, a sanitizer report, or a built automaton that breaks
// its invariants (a live state can always still finish: a walk towards acceptance from the start
// ends accepted) is a bug.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "grammar/byte_dfa.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace {

using namespace strata::grammar;

void check_dfa(std::string_view pattern) {
  RegexLimits limits;
  limits.max_repeat = 64;
  limits.max_nfa_states = 1 << 14;
  const strata::Result<Nfa> nfa = compile_regex(pattern, limits);
  if (!nfa.ok()) return;
  const strata::Result<ByteDfa> dfa = ByteDfa::build(*nfa, 1 << 12);
  if (!dfa.ok()) return;
  // From the start, the first live byte each time: a live state always has a way on or is
  // accepting, so the walk ends accepted within num_states steps (or the start is dead).
  int32_t state = dfa->start();
  for (int32_t step = 0; state != ByteDfa::kDead && !dfa->accepting(state); ++step) {
    STRATA_CHECK(step <= dfa->num_states(), "a walk through live states never ends");
    int32_t next = ByteDfa::kDead;
    for (int b = 0; b < 256 && next == ByteDfa::kDead; ++b) {
      next = dfa->next(state, static_cast<uint8_t>(b));
    }
    STRATA_CHECK(next != ByteDfa::kDead, "a live, non-accepting state with no way on");
    state = next;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    check_dfa(rest);
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

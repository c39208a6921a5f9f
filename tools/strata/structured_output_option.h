#pragma once
// --structured-output of `strata generate` and `strata bench`: one constraint for the request(s),
// json_object, json_schema=@FILE, regex=PATTERN or choice=A|B|... (docs/grammar.md).

#include <string>

#include "strata/structured_output.h"

namespace strata::cli {

inline constexpr const char* kStructuredOutputHelp =
    "Constrain the output: json_object, json_schema=@FILE, grammar=@FILE (GBNF), regex=PATTERN "
    "or choice=A|B|... (needs the model's tokenizer)";

// The constraint the flag names (kind none for ""); strata::Error, one line, for a malformed
// value or an unreadable schema or grammar file.
StructuredOutput parse_structured_output(const std::string& spec);

}  // namespace strata::cli

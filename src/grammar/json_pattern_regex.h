#pragma once
// A JSON Schema "pattern" (a regex over a string's decoded value) rewritten as a regex over the
// string's JSON text, the content between its quotes, in the dialect of regex.h.

#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::grammar::json_regex {

// The content of a string whose decoded value matches `pattern`: ECMA-262 syntax restricted to
// what regex.h accepts, unanchored unless it starts with ^ or ends with $ (a search, as JSON
// Schema says). A character JSON must escape (", \, U+0000..U+001F) matches as its escapes; any
// other matches as written, not as a \uXXXX escape. InvalidArgument, with the offset, for syntax
// outside the dialect (lookaround, backreferences, lazy quantifiers, anchors inside, \b, \p...).
Result<std::string> pattern_content(std::string_view pattern);

}  // namespace strata::grammar::json_regex

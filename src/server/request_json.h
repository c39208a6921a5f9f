#pragma once
// The one entry point for JSON that comes from a request, and the one way back out.
//
// parse_request_json checks the raw bytes before any value is built: valid UTF-8, no NUL byte
// (nlohmann's lexer takes NUL for the end of input and would ignore what follows), and nesting no
// deeper than kMaxRequestJsonDepth (nlohmann's copies, dumps and destructor recurse: a 1M-deep
// array would overflow a handler thread's stack). Only then is the body parsed, as one whole
// value (trailing bytes are an error). safe_dump serializes request-derived text with invalid
// UTF-8 replaced (U+FFFD) instead of throwing. Both are thread-safe and linear in the input.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <variant>

#include "server/api_error.h"

namespace strata::server {

// OpenAI requests nest about 10 deep (a tool's JSON-schema parameters add two levels per nested
// property): 64 leaves room for deep schemas and bounds the recursion well inside a thread stack.
inline constexpr int kMaxRequestJsonDepth = 64;

// The parsed body, or a 400 naming what is wrong (invalid UTF-8, a NUL byte, nesting beyond the
// limit, malformed JSON).
std::variant<nlohmann::json, ApiError> parse_request_json(std::string_view body);
std::string safe_dump(const nlohmann::json& value);

}  // namespace strata::server

#pragma once
// The one entry point for JSON that comes from a request, and the one way back out.
//
// parse_request_json is core's parse_json_input (json_input.h: valid UTF-8, no NUL byte, nesting
// checked on the raw bytes before any value is built, then one whole value) with the request
// limit, its faults turned into 400s. safe_dump (core) serializes request-derived text with
// invalid UTF-8 replaced (U+FFFD) instead of throwing. Both are thread-safe and linear in the
// input.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <variant>

#include "core/json_input.h"
#include "server/api_error.h"

namespace strata::server {

// OpenAI requests nest about 10 deep (a tool's JSON-schema parameters add two levels per nested
// property): 64 leaves room for deep schemas and bounds the recursion well inside a thread stack.
inline constexpr int kMaxRequestJsonDepth = 64;

// The parsed body, or a 400 naming what is wrong (invalid UTF-8, a NUL byte, nesting beyond the
// limit, malformed JSON).
std::variant<nlohmann::json, ApiError> parse_request_json(std::string_view body);
using strata::safe_dump;

}  // namespace strata::server

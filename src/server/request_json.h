#pragma once
// The one entry point for JSON that comes from a request, and the one way back out.
//
// parse_request_json rejects a body nested deeper than kMaxRequestJsonDepth before any value is
// built (nlohmann's copies, dumps and destructor recurse: a 1M-deep array would overflow a
// handler thread's stack), then parses it. safe_dump serializes request-derived text with invalid
// UTF-8 replaced (U+FFFD) instead of throwing.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <variant>

#include "server/api_error.h"

namespace strata::server {

inline constexpr int kMaxRequestJsonDepth = 64;

// The parsed body, or a 400 naming what is wrong (malformed JSON, nesting beyond the limit).
std::variant<nlohmann::json, ApiError> parse_request_json(std::string_view body);
std::string safe_dump(const nlohmann::json& value);

}  // namespace strata::server

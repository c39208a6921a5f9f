#include "server/request_json.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace strata::server {

namespace {

struct Scan {
  int deepest = 0;
  bool nul = false;
};

// The deepest nesting of arrays and objects in `text` (bytes outside strings; stops once past
// `limit`), and whether it holds a NUL byte.
Scan scan(std::string_view text, int limit) {
  Scan s;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (c == '\0') {
      s.nul = true;
      return s;
    }
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      s.deepest = std::max(s.deepest, ++depth);
      if (s.deepest > limit) return s;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return s;
}

}  // namespace

std::variant<nlohmann::json, ApiError> parse_request_json(std::string_view body) {
  if (!tokenizer::is_valid_utf8(body)) {
    return ApiError::bad_request("the request body is not valid UTF-8");
  }
  const Scan s = scan(body, kMaxRequestJsonDepth);
  if (s.nul) return ApiError::bad_request("the request body contains a NUL byte");
  if (s.deepest > kMaxRequestJsonDepth) {
    return ApiError::bad_request("the request body nests arrays and objects deeper than " +
                                 std::to_string(kMaxRequestJsonDepth) + " levels");
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ApiError::bad_request("the request body is not valid JSON");
  return j;
}

std::string safe_dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace strata::server

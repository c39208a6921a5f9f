#include "server/request_json.h"

namespace strata::server {

namespace {

// The deepest nesting of arrays and objects in `text`, scanning bytes outside strings; stops
// counting once past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
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
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

std::variant<nlohmann::json, ApiError> parse_request_json(std::string_view body) {
  if (nesting_depth(body, kMaxRequestJsonDepth) > kMaxRequestJsonDepth) {
    return ApiError::bad_request("the request body nests arrays and objects deeper than " +
                                 std::to_string(kMaxRequestJsonDepth) + " levels");
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) return ApiError::bad_request("the request body is not valid JSON");
  return j;
}

std::string safe_dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace strata::server

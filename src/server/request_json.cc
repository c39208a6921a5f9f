#include "server/request_json.h"

#include <utility>

namespace strata::server {

std::variant<nlohmann::json, ApiError> parse_request_json(std::string_view body) {
  std::variant<nlohmann::json, JsonInputError> parsed =
      parse_json_input(body, kMaxRequestJsonDepth);
  if (auto* j = std::get_if<nlohmann::json>(&parsed)) return std::move(*j);
  switch (std::get<JsonInputError>(parsed).fault) {
    case JsonInputFault::kInvalidUtf8:
      return ApiError::bad_request("the request body is not valid UTF-8");
    case JsonInputFault::kNulByte:
      return ApiError::bad_request("the request body contains a NUL byte");
    case JsonInputFault::kTooDeep:
      return ApiError::bad_request("the request body nests arrays and objects deeper than " +
                                   std::to_string(kMaxRequestJsonDepth) + " levels");
    case JsonInputFault::kSyntax:
      return ApiError::bad_request("the request body is not valid JSON");
  }
  return ApiError::bad_request("the request body is not valid JSON");  // unreachable: all faults
}

}  // namespace strata::server

#pragma once
// ApiError: an OpenAI error object and its HTTP status. Every bad request gets one:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

#include <optional>
#include <string>

#include "core/status.h"

namespace strata::server {

struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::optional<std::string> param;
  std::optional<std::string> code;

  static ApiError bad_request(std::string message, std::optional<std::string> param = {},
                              std::optional<std::string> code = {}) {
    return {400, "invalid_request_error", std::move(message), std::move(param), std::move(code)};
  }
  // The status's code picks the HTTP status (InvalidArgument 400, NotFound 404, Unavailable 503,
  // anything else 500).
  static ApiError from_status(const Status& status);
  std::string to_json() const;
};

}  // namespace strata::server

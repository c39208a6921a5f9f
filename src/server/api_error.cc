#include "server/api_error.h"

#include <nlohmann/json.hpp>

#include "server/request_json.h"

namespace strata::server {

ApiError ApiError::from_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return bad_request(status.message());
    case StatusCode::kNotFound: return {404, "not_found_error", status.message(), {}, {}};
    case StatusCode::kUnavailable: return {503, "service_unavailable", status.message(), {}, {}};
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnsupported:
    case StatusCode::kInternal:
    case StatusCode::kOk:
      break;
  }
  return {500, "internal_error", status.message(), {}, {}};
}

std::string ApiError::to_json() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param ? nlohmann::json(*param) : nlohmann::json(nullptr);
  e["code"] = code ? nlohmann::json(*code) : nlohmann::json(nullptr);
  return safe_dump(nlohmann::json{{"error", e}});  // the message may quote request text
}

}  // namespace strata::server

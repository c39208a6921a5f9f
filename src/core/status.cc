#include "core/status.h"

#include <cstdio>
#include <cstdlib>

namespace strata {

namespace detail {
void result_misuse(const char* what) {
  std::fprintf(stderr, "strata: %s\n", what);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kUnavailable: return "unavailable";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace strata

#pragma once
// strata::Error: bad files or configuration found at start-up. The message is written for the
// user (what is wrong, where, and what to do); `main` catches it once, prints it on one line and
// exits non-zero. Never thrown from the per-step hot path.

#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace strata

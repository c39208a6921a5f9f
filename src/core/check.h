#pragma once
// STRATA_CHECK: always-on invariant checks (programmer errors). A failed check prints
// file:line and the message to stderr and aborts; it is never used for bad user input, which gets
// a strata::Error (start-up) or a Status (per request) instead.

#include <cstdio>
#include <cstdlib>

namespace strata::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "%s:%d: STRATA_CHECK(%s) failed: %s\n", file, line, cond, msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace strata::detail

#define STRATA_CHECK(cond, msg)                                          \
  do {                                                                   \
    if (!(cond)) [[unlikely]] {                                          \
      ::strata::detail::check_failed(__FILE__, __LINE__, #cond, (msg));  \
    }                                                                    \
  } while (0)

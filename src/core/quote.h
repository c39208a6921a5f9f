#pragma once
// Text from files and requests, made safe to put in a one-line error message: bounded in length
// (a message never carries a whole file), one line (control characters become '?'), valid UTF-8
// (invalid bytes become U+FFFD, so a JSON serializer or a terminal never chokes on the message).
// Pure functions, thread-safe; they read at most max_bytes of the input (plus one code point).

#include <cstddef>
#include <string>
#include <string_view>

namespace strata {

// `s` cut after about max_bytes (at a code point boundary) with "..." appended, control
// characters replaced by '?', invalid UTF-8 by U+FFFD.
std::string one_line(std::string_view s, size_t max_bytes);

// one_line(s, max_bytes) in single quotes: the form error messages quote names and values in.
std::string quote(std::string_view s, size_t max_bytes = 120);

}  // namespace strata

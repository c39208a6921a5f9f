#pragma once
// Python's str methods as chat templates call them (`s.strip()`, `s.split('x')`, ...), on UTF-8
// strings with ASCII case mapping and ASCII whitespace.

#include <string>
#include <string_view>
#include <vector>

#include "chat_template/value.h"

namespace strata::chat_template {

std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right);
std::vector<std::string> split_string(const std::string& s, const Value& sep, int64_t max_split);
std::string replace_all(Evaluator& ev, const std::string& s, const std::string& from,
                        const std::string& to, int64_t count);
std::string to_upper(std::string s);
std::string to_lower(std::string s);
std::string to_title(std::string s);
std::string capitalize(std::string s);

// `s.name` as a bound method, or undefined when strings have no such method.
Value string_method(const std::string& s, const std::string& name);

inline constexpr std::string_view kWhitespace = " \t\n\r\f\v";

}  // namespace strata::chat_template

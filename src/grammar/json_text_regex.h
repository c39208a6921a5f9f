#pragma once
// Regexes for pieces of JSON text, in the dialect of regex.h, that json_schema.cc assembles into a
// schema's regex: literals, repetition past RegexLimits::max_repeat, one character of a string,
// string formats, integers and numbers within bounds (json_pattern_regex.h holds "pattern").
//
// Every function returns a regex that concatenates as is (an atom, a group, or a sequence of
// them); only string_char() is one atom that may be quantified without group().

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/regex.h"

namespace strata::grammar::json_regex {

inline constexpr int64_t kUnbounded = -1;
// The largest n or m of {n,m} in the dialect.
inline constexpr int64_t kMaxRepeat = RegexLimits{}.max_repeat;
// The largest |bound| a numeric keyword may have: its digits stay exact in a double and int64.
inline constexpr int64_t kMaxNumericBound = 1'000'000'000'000'000;

// `text` matched literally: metacharacters (and ^ $, anchors to PCRE) escaped.
std::string literal(std::string_view text);
// (?:regex)
std::string group(std::string_view regex);
// `atom` repeated min_count..max_count times (max_count kUnbounded for no limit); counts past the
// dialect's max_repeat of 1000 are written as nested repetitions. Precondition: 0 <= min_count,
// and min_count <= max_count unless unbounded.
std::string repeat(std::string_view atom, int64_t min_count, int64_t max_count);

// One character of a JSON string's content: a code point other than '"', '\' and U+0000..U+001F,
// or one of the escapes \" \\ \/ \b \f \n \r \t \uXXXX.
std::string string_char();

// The content (between the quotes) of a string of a "format": date, time, date-time, uuid,
// email, ipv4. InvalidArgument naming any other format.
Result<std::string> format_content(std::string_view format);

// Bounds on a number, as integers (json_schema.cc refuses fractional bounds on a "number" and
// rounds them inward on an "integer").
struct NumberBounds {
  std::optional<int64_t> lower, upper;
  bool lower_exclusive = false, upper_exclusive = false;
};
// A JSON integer (`integer`) or number within `bounds`; std::nullopt when none is. Unbounded
// numbers may have an exponent; bounded ones are written in plain decimal (no exponent).
std::optional<std::string> number(const NumberBounds& bounds, bool integer);

}  // namespace strata::grammar::json_regex

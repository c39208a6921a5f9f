#pragma once
// UTF-8 validity, decoding and encoding, shared by everything that must not pass invalid bytes
// on: the JSON input entry point and message quoting here in core, the tokenizer's decoders
// (tokenizer/utf8.h re-exports these), the server's request checks, the grammar layer's code
// points. Pure functions, thread-safe, linear in the input.

#include <cstddef>
#include <string>
#include <string_view>

namespace strata {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not
// a valid sequence (overlong, surrogate, above U+10FFFF, truncated).
size_t utf8_valid_length(std::string_view s, size_t i);

bool is_valid_utf8(std::string_view s);

// Replaces each maximal invalid subsequence with U+FFFD, as Rust's from_utf8_lossy does.
std::string utf8_lossy(std::string_view s);

// Decodes the code point at s[i] (which must start a valid sequence) and returns its length.
size_t utf8_decode(std::string_view s, size_t i, char32_t& cp);
// Appends the UTF-8 encoding of cp (a Unicode scalar value).
void utf8_append(std::string& out, char32_t cp);

}  // namespace strata

#pragma once
// UTF-8 helpers shared by the tokenizer stages: decoding one code point, lossy repair of invalid
// bytes (the way Rust's String::from_utf8_lossy does it, which is what Hugging Face's decoders
// produce), the GPT-2 byte-level alphabet, and the Unicode predicates the added-token matcher
// needs. All functions are pure and thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not
// a valid sequence (overlong, surrogate, above U+10FFFF, truncated).
size_t utf8_valid_length(std::string_view s, size_t i);

// Decodes the code point at s[i] (which must start a valid sequence) and returns its length.
size_t utf8_decode(std::string_view s, size_t i, char32_t& cp);

void utf8_append(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view s);

// Replaces each maximal invalid subsequence with U+FFFD, as Rust's from_utf8_lossy does.
std::string utf8_lossy(std::string_view s);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_unicode_whitespace(char32_t cp);
// Rust's char::is_alphanumeric (letters and numbers).
bool is_unicode_alphanumeric(char32_t cp);

// The GPT-2 byte-level alphabet: every byte maps to one printable code point, stored as UTF-8.
const std::array<std::string, 256>& byte_to_unicode();
// The inverse for one code point: the byte it stands for, or -1 when cp is not in the alphabet.
int unicode_to_byte(char32_t cp);

}  // namespace strata::tokenizer

#pragma once
// UTF-8 helpers shared by the tokenizer stages: decoding and encoding one code point, lossy repair
// of invalid bytes (the way Rust's String::from_utf8_lossy does it, which is what Hugging Face's
// decoders produce; core/utf8.h holds these and validity, re-exported here), the GPT-2 byte-level alphabet,
// and the Unicode predicates the added-token matcher needs. All functions are pure and
// thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace strata::tokenizer {

using strata::is_valid_utf8;
using strata::kReplacementChar;
using strata::utf8_append;
using strata::utf8_decode;
using strata::utf8_lossy;
using strata::utf8_valid_length;


// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_unicode_whitespace(char32_t cp);
// Rust's char::is_alphanumeric (letters and numbers).
bool is_unicode_alphanumeric(char32_t cp);

// The GPT-2 byte-level alphabet: every byte maps to one printable code point, stored as UTF-8.
const std::array<std::string, 256>& byte_to_unicode();
// The inverse for one code point: the byte it stands for, or -1 when cp is not in the alphabet.
int unicode_to_byte(char32_t cp);

}  // namespace strata::tokenizer

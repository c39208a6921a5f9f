#pragma once
// Character-level helpers: Jinja indexes, slices and measures strings by character, and chat
// templates' strings are UTF-8. A malformed byte counts as one character.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::chat_template {

// The characters of `s`, each as its UTF-8 bytes.
std::vector<std::string> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);

}  // namespace strata::chat_template

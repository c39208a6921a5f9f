#include "chat_template/utf8_text.h"

namespace strata::chat_template {
namespace {

size_t char_length(std::string_view s, size_t at) {
  auto lead = static_cast<unsigned char>(s[at]);
  size_t len = lead < 0x80           ? 1
               : (lead >> 5) == 0x6  ? 2
               : (lead >> 4) == 0xE  ? 3
               : (lead >> 3) == 0x1E ? 4
                                     : 1;
  if (at + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(s[at + k]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

}  // namespace

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> chars;
  for (size_t at = 0; at < s.size();) {
    size_t len = char_length(s, at);
    chars.emplace_back(s.substr(at, len));
    at += len;
  }
  return chars;
}

size_t utf8_length(std::string_view s) {
  size_t count = 0;
  for (size_t at = 0; at < s.size(); at += char_length(s, at)) ++count;
  return count;
}

}  // namespace strata::chat_template

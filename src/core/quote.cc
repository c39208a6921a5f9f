#include "core/quote.h"

#include "core/utf8.h"

namespace strata {

std::string one_line(std::string_view s, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && i < max_bytes) {
    const size_t n = utf8_valid_length(s, i);
    if (n == 0) {
      out += kReplacementChar;
      ++i;
    } else if (n == 1) {
      const auto c = static_cast<unsigned char>(s[i]);
      out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
      ++i;
    } else {
      out += s.substr(i, n);
      i += n;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

std::string quote(std::string_view s, size_t max_bytes) {
  return "'" + one_line(s, max_bytes) + "'";
}

}  // namespace strata

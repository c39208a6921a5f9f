#include "core/utf8.h"

#include <cstdint>

namespace strata {

namespace {

// What a lead byte of a multi-byte sequence announces: its length (0: not a lead byte) and the
// range its second byte must fall in (overlong forms, surrogates and code points past U+10FFFF
// excluded); later bytes are 0x80-0xBF.
struct Lead {
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;
};

Lead lead_of(uint8_t c) {
  Lead l;
  if (c >= 0xC2 && c <= 0xDF) {
    l.n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    l.n = 3;
    if (c == 0xE0) l.lo = 0xA0;
    if (c == 0xED) l.hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    l.n = 4;
    if (c == 0xF0) l.lo = 0x90;
    if (c == 0xF4) l.hi = 0x8F;
  }
  return l;
}

}  // namespace

size_t utf8_valid_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  const auto [n, lo, hi] = lead_of(c);
  if (n == 0 || i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

namespace {

// Length of the longest prefix of an invalid sequence at s[i] that a valid sequence could start
// with (the "maximal subpart"); at least 1.
size_t maximal_invalid_prefix(std::string_view s, size_t i) {
  const auto [n, lo, hi] = lead_of(static_cast<uint8_t>(s[i]));
  if (n == 0) return 1;
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    const auto d = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (d < l || d > h) break;
  }
  return k;
}

}  // namespace

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacementChar);
      i += maximal_invalid_prefix(s, i);
    }
  }
  return out;
}

size_t utf8_decode(std::string_view s, size_t i, char32_t& cp) {
  const auto c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  cp = c & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
  return n;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace strata

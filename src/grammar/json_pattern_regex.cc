#include "grammar/json_pattern_regex.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/utf8.h"
#include "grammar/json_text_regex.h"

namespace strata::grammar::json_regex {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
using CodeSet = std::vector<std::pair<uint32_t, uint32_t>>;  // ranges of code points

CodeSet normalized(CodeSet s) {
  std::sort(s.begin(), s.end());
  CodeSet out;
  for (const auto& r : s) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// Every code point but the surrogates that is not in `s`.
CodeSet complement(const CodeSet& s) {
  CodeSet holes = s;
  holes.emplace_back(0xD800, 0xDFFF);
  CodeSet out;
  uint32_t next = 0;
  for (const auto& r : normalized(holes)) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = std::max(next, r.second + 1);
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

bool contains(const CodeSet& s, uint32_t cp) {
  return std::any_of(s.begin(), s.end(),
                     [cp](const auto& r) { return r.first <= cp && cp <= r.second; });
}

std::string utf8(uint32_t cp) {
  std::string out;
  utf8_append(out, cp);
  return out;
}

std::string hex(uint32_t value, int digits) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out(static_cast<size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, value >>= 4)
    out[static_cast<size_t>(i)] = kDigits[value & 0xF];
  return out;
}

// A code point as a class member: escaped where it could be read as syntax or is not printable.
std::string class_member(uint32_t cp) {
  const bool alnum =
      (cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z');
  if (alnum) return std::string(1, static_cast<char>(cp));
  if (cp < 0x100) return "\\x" + hex(cp, 2);
  if (cp <= 0xFFFF) return "\\u" + hex(cp, 4);
  return utf8(cp);
}

// The JSON escapes of control character `cp`: \uXXXX in either case, and its short form if any.
std::string control_escapes(uint32_t cp) {
  std::string u = "\\\\u00" + hex(cp >> 4, 1);
  const char low = hex(cp & 0xF, 1)[0];
  u += (low >= 'A') ? std::string("[") + low + static_cast<char>(low + 32) + "]"
                    : std::string(1, low);
  static constexpr std::pair<uint32_t, char> kShort[] = {
      {8, 'b'}, {9, 't'}, {10, 'n'}, {12, 'f'}, {13, 'r'}};
  for (const auto& [code, letter] : kShort) {
    if (code == cp) return "(?:" + u + "|\\\\" + letter + ")";
  }
  return u;
}

// One character of JSON string text whose decoded value is in `s` (not empty).
std::string char_set_regex(const CodeSet& s) {
  std::vector<std::string> alts;
  const CodeSet specials = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  CodeSet plain_holes = complement(s);
  plain_holes.insert(plain_holes.end(), specials.begin(), specials.end());
  const CodeSet plain = complement(plain_holes);
  if (plain.size() == 1 && plain[0].first == plain[0].second) {
    alts.push_back(literal(utf8(plain[0].first)));
  } else if (!plain.empty()) {
    std::string cls = "[";
    for (const auto& [lo, hi] : plain) {
      cls += class_member(lo);
      if (hi != lo) cls += "-" + class_member(hi);
    }
    alts.push_back(cls + "]");
  }
  if (contains(s, '"')) alts.emplace_back(R"(\\")");
  if (contains(s, '\\')) alts.emplace_back(R"(\\\\)");
  for (uint32_t cp = 0; cp < 0x20; ++cp) {
    if (contains(s, cp)) alts.push_back(control_escapes(cp));
  }
  if (alts.size() == 1) return alts.front();
  std::string out;
  for (const std::string& alt : alts) out += (out.empty() ? "" : "|") + alt;
  return group(out);
}

// Reads a pattern left to right, writing the rewritten regex; the first error stops it.
class PatternRewriter {
 public:
  explicit PatternRewriter(std::string_view pattern) : p_(pattern) {}

  Result<std::string> run() {
    const bool anchored_start = !p_.empty() && p_.front() == '^';
    const bool anchored_end = ends_with_anchor();
    pos_ = anchored_start ? 1 : 0;
    const size_t end = p_.size() - (anchored_end ? 1 : 0);
    std::string body;
    int depth = 0;
    bool top_level_alternation = false;
    bool can_quantify = false;
    while (pos_ < end && error_.empty()) {
      const char c = p_[pos_];
      if (c == '(') {
        if (p_.substr(pos_, 2) == "(?" && p_.substr(pos_, 3) != "(?:") {
          fail("lookaround, named groups and flags are not supported");
          break;
        }
        pos_ += p_.substr(pos_, 3) == "(?:" ? 3 : 1;
        body += "(?:";
        ++depth;
        can_quantify = false;
      } else if (c == ')') {
        if (--depth < 0) fail("unbalanced ')'");
        body += ')';
        ++pos_;
        can_quantify = true;
      } else if (c == '|') {
        top_level_alternation |= depth == 0;
        body += '|';
        ++pos_;
        can_quantify = false;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!can_quantify) fail("a quantifier must follow an atom");
        body += quantifier();
        can_quantify = false;
      } else if (c == '^' || c == '$') {
        fail("anchors are supported only at the pattern's ends");
      } else {
        std::optional<CodeSet> set = atom(end);
        if (set) body += char_set_regex(*set);
        can_quantify = true;
      }
    }
    if (error_.empty() && depth != 0) fail("unbalanced '('");
    if (error_.empty() && top_level_alternation && (anchored_start || anchored_end)) {
      fail("anchors around a top-level '|' are not supported; group the alternatives");
    }
    if (!error_.empty()) return Status::InvalidArgument(error_);
    const std::string any = string_char() + "*";
    return (anchored_start ? "" : any) + (body.empty() ? "" : group(body)) +
           (anchored_end ? "" : any);
  }

 private:
  bool ends_with_anchor() const {
    if (p_.empty() || p_.back() != '$') return false;
    size_t backslashes = 0;
    for (size_t i = p_.size() - 1; i > 0 && p_[i - 1] == '\\'; --i) ++backslashes;
    return backslashes % 2 == 0;
  }

  void fail(const std::string& what) {
    if (error_.empty()) error_ = "pattern offset " + std::to_string(pos_) + ": " + what;
  }

  // * + ? {n} {n,} {n,m}, refusing the lazy and possessive forms.
  std::string quantifier() {
    std::string q(1, p_[pos_]);
    if (p_[pos_] == '{') {
      const size_t close = p_.find('}', pos_);
      const std::string_view inner =
          close == std::string_view::npos ? "" : p_.substr(pos_ + 1, close - pos_ - 1);
      const size_t comma = inner.find(',');
      const std::string_view lo = inner.substr(0, comma);
      const std::string_view hi = comma == std::string_view::npos ? lo : inner.substr(comma + 1);
      const auto digits = [](std::string_view d) {
        return !d.empty() && d.size() <= 4 &&
               std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
      };
      if (!digits(lo) || (!hi.empty() && !digits(hi))) {
        fail("a literal '{' must be escaped");
        return "";
      }
      const int64_t n = std::stoll(std::string(lo));
      const int64_t m = hi.empty() ? n : std::stoll(std::string(hi));
      if (n > m || m > kMaxRepeat) fail("a repetition count must be n <= m <= 1000");
      q = std::string(p_.substr(pos_, close - pos_ + 1));
      pos_ = close;
    }
    ++pos_;
    if (pos_ < p_.size() && (p_[pos_] == '?' || p_[pos_] == '+')) {
      fail("lazy and possessive quantifiers are not supported");
    }
    return q;
  }

  // A literal, '.', an escape or a class: the code points it matches, nullopt after an error.
  std::optional<CodeSet> atom(size_t end) {
    const char c = p_[pos_];
    if (c == '.') {
      ++pos_;
      return complement({{'\n', '\n'}});
    }
    if (c == '[') return char_class(end);
    if (c == '\\') return escape(end);
    if (c == ']' || c == '}') {
      fail(std::string("'") + c + "' must be escaped");
      return std::nullopt;
    }
    const std::optional<uint32_t> cp = code_point();
    if (!cp) return std::nullopt;
    return CodeSet{{*cp, *cp}};
  }

  // One UTF-8 code point at pos_.
  std::optional<uint32_t> code_point() {
    if (utf8_valid_length(p_, pos_) == 0) {
      fail("invalid UTF-8");
      return std::nullopt;
    }
    char32_t cp = 0;
    pos_ += utf8_decode(p_, pos_, cp);
    return static_cast<uint32_t>(cp);
  }

  std::optional<uint32_t> hex_value(size_t digits, size_t end) {
    if (pos_ + digits > end) return std::nullopt;
    uint32_t value = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = p_[pos_ + i];
      const int d = (h >= '0' && h <= '9')   ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
      if (d < 0) return std::nullopt;
      value = value * 16 + static_cast<uint32_t>(d);
    }
    pos_ += digits;
    return value;
  }

  // The escape at pos_ (a backslash): one code point or a shorthand class.
  std::optional<CodeSet> escape(size_t end) {
    if (++pos_ >= end) {
      fail("a pattern cannot end in '\\'");
      return std::nullopt;
    }
    const char c = p_[pos_++];
    const CodeSet digit = {{'0', '9'}};
    const CodeSet word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const CodeSet space = {{'\t', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd':
        return digit;
      case 'w':
        return word;
      case 's':
        return space;
      case 'D':
        return complement(digit);
      case 'W':
        return complement(word);
      case 'S':
        return complement(space);
      case 'n':
        return CodeSet{{'\n', '\n'}};
      case 'r':
        return CodeSet{{'\r', '\r'}};
      case 't':
        return CodeSet{{'\t', '\t'}};
      case 'f':
        return CodeSet{{'\f', '\f'}};
      case 'v':
        return CodeSet{{'\v', '\v'}};
      case 'x':
      case 'u': {
        const std::optional<uint32_t> cp = hex_value(c == 'x' ? 2 : 4, end);
        if (!cp || (*cp >= 0xD800 && *cp <= 0xDFFF)) {
          fail(std::string("\\") + c + " needs " + (c == 'x' ? "2" : "4") +
               " hex digits of a code point");
          return std::nullopt;
        }
        return CodeSet{{*cp, *cp}};
      }
      default:
        break;
    }
    if (std::string_view("\\.[]()|*+?{}/-^$\"").find(c) != std::string_view::npos) {
      return CodeSet{{static_cast<uint32_t>(c), static_cast<uint32_t>(c)}};
    }
    --pos_;
    fail(std::string("escape \\") + c + " is not supported");
    return std::nullopt;
  }

  // [...] or [^...] at pos_.
  std::optional<CodeSet> char_class(size_t end) {
    ++pos_;
    const bool negated = pos_ < end && p_[pos_] == '^';
    if (negated) ++pos_;
    CodeSet members;
    while (pos_ < end && p_[pos_] != ']') {
      if (p_.substr(pos_, 2) == "[:") {
        fail("POSIX classes are not supported");
        return std::nullopt;
      }
      std::optional<CodeSet> lo = p_[pos_] == '\\' ? escape(end) : single();
      if (!lo) return std::nullopt;
      if (pos_ + 1 < end && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        std::optional<CodeSet> hi = p_[pos_] == '\\' ? escape(end) : single();
        if (!hi) return std::nullopt;
        const bool single_points = lo->size() == 1 && hi->size() == 1 &&
                                   lo->front().first == lo->front().second &&
                                   hi->front().first == hi->front().second;
        if (!single_points || lo->front().first > hi->front().first) {
          fail("a class range needs two code points in order");
          return std::nullopt;
        }
        lo = CodeSet{{lo->front().first, hi->front().first}};
      }
      members.insert(members.end(), lo->begin(), lo->end());
    }
    if (pos_ >= end) {
      fail("unterminated class");
      return std::nullopt;
    }
    ++pos_;
    CodeSet set = negated ? complement(members) : normalized(members);
    if (set.empty()) {
      fail("an empty class matches nothing");
      return std::nullopt;
    }
    return set;
  }

  std::optional<CodeSet> single() {
    const std::optional<uint32_t> cp = code_point();
    if (!cp) return std::nullopt;
    return CodeSet{{*cp, *cp}};
  }

  std::string_view p_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

Result<std::string> pattern_content(std::string_view pattern) {
  return PatternRewriter(pattern).run();
}

}  // namespace strata::grammar::json_regex

#include "grammar/json_text_regex.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace strata::grammar::json_regex {
namespace {

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts.front();
  std::string out;
  for (const std::string& alt : alts) {
    if (!out.empty()) out += '|';
    out += alt;
  }
  return group(out);
}

std::string quantified(std::string_view atom, int64_t min_count, int64_t max_count) {
  if (min_count == 1 && max_count == 1) return std::string(atom);
  std::string out(atom);
  if (max_count == kUnbounded) {
    if (min_count == 0) return out + "*";
    if (min_count == 1) return out + "+";
    return out + "{" + std::to_string(min_count) + ",}";
  }
  if (min_count == 0 && max_count == 1) return out + "?";
  if (min_count == max_count) return out + "{" + std::to_string(min_count) + "}";
  return out + "{" + std::to_string(min_count) + "," + std::to_string(max_count) + "}";
}

// `atom` exactly n times.
std::string exactly(std::string_view atom, int64_t n) {
  if (n == 0) return "";
  if (n <= kMaxRepeat) return quantified(atom, n, n);
  return exactly(group(quantified(atom, kMaxRepeat, kMaxRepeat)), n / kMaxRepeat) +
         exactly(atom, n % kMaxRepeat);
}

// `atom` 0..n times: (atom{0,1000}){0,n/1000} reaches every count up to 1000 * (n/1000).
std::string up_to(std::string_view atom, int64_t n) {
  if (n == 0) return "";
  if (n <= kMaxRepeat) return quantified(atom, 0, n);
  return up_to(group(quantified(atom, 0, kMaxRepeat)), n / kMaxRepeat) +
         up_to(atom, n % kMaxRepeat);
}

// ---- integers: digit strings within [lo, hi] ----

std::string digit_range(char lo, char hi) {
  if (lo == hi) return std::string(1, lo);
  return std::string("[") + lo + "-" + hi + "]";
}

std::string any_digits(size_t n) { return n == 0 ? "" : quantified("[0-9]", n, n); }

// Digit strings of lo.size() digits between lo and hi, which have that many digits.
std::string same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo.front() == hi.front()) {
    return lo.substr(0, 1) + same_length_range(lo.substr(1), hi.substr(1));
  }
  const size_t rest = lo.size() - 1;
  const bool lo_rest_min = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_rest_max = hi.find_first_not_of('9', 1) == std::string::npos;
  const char first_full = lo_rest_min ? lo[0] : static_cast<char>(lo[0] + 1);
  const char last_full = hi_rest_max ? hi[0] : static_cast<char>(hi[0] - 1);
  std::vector<std::string> alts;
  if (!lo_rest_min) {
    alts.push_back(lo[0] + same_length_range(lo.substr(1), std::string(rest, '9')));
  }
  if (first_full <= last_full)
    alts.push_back(digit_range(first_full, last_full) + any_digits(rest));
  if (!hi_rest_max) {
    alts.push_back(hi[0] + same_length_range(std::string(rest, '0'), hi.substr(1)));
  }
  return alternatives(alts);
}

int64_t power_of_ten(size_t n) {
  int64_t p = 1;
  for (size_t i = 0; i < n; ++i) p *= 10;
  return p;
}

// Integers in [lo, hi] (hi kUnbounded for no limit), 0 <= lo <= hi, without leading zeros.
std::string natural_range(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  const size_t lo_digits = std::to_string(lo).size();
  const size_t hi_digits = hi == kUnbounded ? lo_digits : std::to_string(hi).size();
  for (size_t n = lo_digits; n <= hi_digits; ++n) {
    const int64_t first = std::max(lo, n == 1 ? 0 : power_of_ten(n - 1));
    const int64_t last = hi == kUnbounded ? power_of_ten(n) - 1 : std::min(hi, power_of_ten(n) - 1);
    alts.push_back(same_length_range(std::to_string(first), std::to_string(last)));
  }
  if (hi == kUnbounded) alts.push_back("[1-9]" + quantified("[0-9]", lo_digits, kUnbounded));
  return alternatives(alts);
}

// ---- numbers: an integer part and the fractions allowed with it ----

enum class Fraction { kNone, kZero, kNonzero, kAll };

// Which fractions f in [0, 1) keep i + f within `b` (integer bounds, so one test per side).
Fraction fraction_at(int64_t i, const NumberBounds& b) {
  bool nonzero_only = false, zero_only = false;
  if (b.lower) {
    if (i < *b.lower) return Fraction::kNone;
    nonzero_only = b.lower_exclusive && i == *b.lower;
  }
  if (b.upper) {
    if (i > *b.upper || (b.upper_exclusive && i == *b.upper)) return Fraction::kNone;
    zero_only = i == *b.upper;
  }
  if (nonzero_only && zero_only) return Fraction::kNone;
  if (nonzero_only) return Fraction::kNonzero;
  return zero_only ? Fraction::kZero : Fraction::kAll;
}

std::string fraction_regex(Fraction f) {
  switch (f) {
    case Fraction::kNone:
      return "";
    case Fraction::kZero:
      return "(?:\\.0+)?";
    case Fraction::kNonzero:
      return "\\.[0-9]*[1-9][0-9]*";
    case Fraction::kAll:
      return "(?:\\.[0-9]+)?";
  }
  return "";
}

// Non-negative numbers (integers when `integer`) within `b`: the fraction set only changes at
// the bounds, so the integer part splits into segments at 0, lower, lower+1, upper, upper+1.
std::string magnitude(const NumberBounds& b, bool integer) {
  std::set<int64_t> cuts = {0};
  for (const std::optional<int64_t>& bound : {b.lower, b.upper}) {
    if (!bound) continue;
    if (*bound >= 0) cuts.insert(*bound);
    if (*bound + 1 >= 0) cuts.insert(*bound + 1);
  }
  std::vector<std::string> alts;
  for (auto it = cuts.begin(); it != cuts.end(); ++it) {
    const auto next = std::next(it);
    const int64_t last = next == cuts.end() ? kUnbounded : *next - 1;
    const Fraction f = fraction_at(*it, b);
    if (f == Fraction::kNone || (integer && f == Fraction::kNonzero)) continue;
    alts.push_back(natural_range(*it, last) + (integer ? "" : fraction_regex(f)));
  }
  return alts.empty() ? "" : alternatives(alts);
}

}  // namespace

std::string literal(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::string_view("\\.[]()|*+?{}^$").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string group(std::string_view regex) { return "(?:" + std::string(regex) + ")"; }

std::string repeat(std::string_view atom, int64_t min_count, int64_t max_count) {
  if (max_count != kUnbounded && max_count <= kMaxRepeat) {
    return quantified(atom, min_count, max_count);
  }
  if (max_count == kUnbounded) {
    if (min_count <= kMaxRepeat) return quantified(atom, min_count, kUnbounded);
    return exactly(atom, min_count) + quantified(atom, 0, kUnbounded);
  }
  return exactly(atom, min_count) + up_to(atom, max_count - min_count);
}

std::string string_char() {
  // \uXXXX of a code point, or a surrogate pair: a lone surrogate is valid JSON syntax that
  // many readers refuse.
  return R"((?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u(?:[0-9A-Ca-cEFef][0-9A-Fa-f]{3}|[Dd][0-7][0-9A-Fa-f]{2}|[Dd][89ABab][0-9A-Fa-f]{2}\\u[Dd][C-Fc-f][0-9A-Fa-f]{2})))";
}

Result<std::string> format_content(std::string_view format) {
  // Days up to 29 in February whatever the year: leap years would need the year's digits.
  static const std::string kDate =
      "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-"
      "(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-9]))";
  // RFC 3339 full-time: a leap second is allowed in any minute.
  static const std::string kTime =
      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?"
      "(?:[Zz]|[+\\-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kHex = "[0-9A-Fa-f]";
  static const std::string kOctet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  // An email as HTML's input type=email accepts it (a dot-atom local part, dotted host labels).
  static const std::string kAtom = R"([A-Za-z0-9!#%&'\*\+\-/=\?\^_`\{\|\}~\$]+)";
  static const std::string kLabel = "[A-Za-z0-9](?:[A-Za-z0-9\\-]{0,61}[A-Za-z0-9])?";
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return kDate + "[Tt]" + kTime;
  if (format == "uuid") {
    return kHex + "{8}-" + kHex + "{4}-" + kHex + "{4}-" + kHex + "{4}-" + kHex + "{12}";
  }
  if (format == "email") {
    return kAtom + "(?:\\." + kAtom + ")*@" + kLabel + "(?:\\." + kLabel + ")+";
  }
  if (format == "ipv4") return kOctet + "(?:\\." + kOctet + "){3}";
  return Status::InvalidArgument("format '" + std::string(format) +
                                 "' is not supported (date, time, date-time, uuid, email, ipv4)");
}

std::optional<std::string> number(const NumberBounds& bounds, bool integer) {
  if (!bounds.lower && !bounds.upper) {
    // At most 18 integer digits and a two-digit exponent: every such text is a number a reader
    // holds (an int64, a finite double), where 1e999 or a 400-digit integer is valid JSON that
    // many parsers refuse or turn into infinity.
    if (integer) return "-?(?:0|[1-9][0-9]{0,17})";
    return "-?(?:0|[1-9][0-9]{0,17})(?:\\.[0-9]+)?(?:[eE][+\\-]?[0-9]{1,2})?";
  }
  // x = -m with m >= 0: x >= lower <=> m <= -lower, and so on, exclusivity kept.
  NumberBounds mirrored;
  if (bounds.upper) mirrored.lower = -*bounds.upper;
  if (bounds.lower) mirrored.upper = -*bounds.lower;
  mirrored.lower_exclusive = bounds.upper_exclusive;
  mirrored.upper_exclusive = bounds.lower_exclusive;
  std::vector<std::string> alts;
  if (std::string m = magnitude(bounds, integer); !m.empty()) alts.push_back(std::move(m));
  // A lower bound >= 0 leaves the negative side at most -0 (-0.000...), the same value as 0:
  // a model offered it writes "age": -0, which readers take but nobody expects.
  const bool non_negative = bounds.lower && *bounds.lower >= 0;
  if (std::string m = magnitude(mirrored, integer); !m.empty() && !non_negative) {
    alts.push_back("-" + m);
  }
  if (alts.empty()) return std::nullopt;
  return alternatives(alts);
}

}  // namespace strata::grammar::json_regex

#include "eval/number_list.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <system_error>

namespace strata::eval {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Result<double> parse_one(std::string_view item) {
  double v = 0.0;
  const char* end = item.data() + item.size();
  const auto [ptr, ec] = std::from_chars(item.data(), end, v);
  if (item.empty() || ec != std::errc() || ptr != end || !std::isfinite(v)) {
    return Status::InvalidArgument("'" + std::string(item) + "' is not a number");
  }
  return v;
}

double round9(double v) { return std::round(v * 1e9) / 1e9; }

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// first, second, ..., last -> the progression (the last value included when the steps land on
// it within 1e-9 of a step).
Result<std::vector<double>> expand(double first, double second, double last) {
  const double step = second - first;
  if (step == 0.0 || (last - first) / step < 1.0) {
    return Status::InvalidArgument("a progression 'a,b,...,c' needs b - a != 0 stepping towards c");
  }
  const double steps = (last - first) / step;
  const double whole = std::round(steps);
  if (std::fabs(steps - whole) > 1e-9 * std::max(1.0, whole)) {
    return Status::InvalidArgument("the progression's steps do not land on its last value");
  }
  if (whole + 1 > static_cast<double>(kMaxListValues)) {
    return Status::InvalidArgument("the progression has more than " +
                                   std::to_string(kMaxListValues) + " values");
  }
  std::vector<double> out;
  for (int64_t i = 0; i <= static_cast<int64_t>(whole); ++i) {
    out.push_back(round9(first + static_cast<double>(i) * step));
  }
  return out;
}

}  // namespace

Result<std::vector<double>> parse_number_list(std::string_view text) {
  std::vector<std::string_view> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    items.push_back(
        trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::vector<double> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i] == "...") {
      if (i != 2 || items.size() != 4) {
        return Status::InvalidArgument("'...' may only appear as 'first,second,...,last'");
      }
      continue;
    }
    if (items[i].empty())
      return Status::InvalidArgument("empty item in '" + std::string(text) + "'");
    Result<double> v = parse_one(items[i]);
    if (!v.ok()) return v.status();
    out.push_back(*v);
  }
  if (items.size() == 4 && items[2] == "...") return expand(out[0], out[1], out[2]);
  if (out.size() > static_cast<size_t>(kMaxListValues)) {
    return Status::InvalidArgument("more than " + std::to_string(kMaxListValues) + " values");
  }
  return out;
}

Result<std::vector<int32_t>> parse_int_list(std::string_view text, int32_t min_value,
                                            int32_t max_value) {
  Result<std::vector<double>> values = parse_number_list(text);
  if (!values.ok()) return values.status();
  std::vector<int32_t> out;
  for (double v : *values) {
    if (v != std::floor(v) || v < min_value || v > max_value) {
      return Status::InvalidArgument(format_number(v) + " is not an integer in [" +
                                     std::to_string(min_value) + ", " + std::to_string(max_value) +
                                     "]");
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

}  // namespace strata::eval

#include "token_id_list.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/quote.h"

namespace strata::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<int32_t> parse_token_id_list(std::string_view text, std::string_view flag) {
  const auto fail = [&](const std::string& why) {
    throw Error(std::string(flag) + " " + quote(text) + ": " + why);
  };
  if (trim(text).empty()) fail("the list of token ids is empty");
  std::vector<int32_t> ids;
  size_t item_idx = 0;
  for (size_t pos = 0; pos <= text.size(); ++item_idx) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) fail("item " + std::to_string(item_idx + 1) + " is empty");
    const bool negative = item.front() == '-';
    const std::string_view digits = negative ? item.substr(1) : item;
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || end != digits.data() + digits.size() ||
        (ec != std::errc() && ec != std::errc::result_out_of_range)) {
      fail(quote(item) + " is not a token id (a non-negative integer)");
    }
    if (negative) fail("token id " + std::string(item) + " is negative");
    if (ec == std::errc::result_out_of_range ||
        value > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      fail("token id " + std::string(item) + " is above the largest token id " +
           std::to_string(std::numeric_limits<int32_t>::max()));
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

}  // namespace strata::cli

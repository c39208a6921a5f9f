#pragma once
// Lists of numbers as the eval commands take them on the command line: "512,1024,2048" or an
// arithmetic progression written "0,0.1,...,1" (first, second, "...", last: the step is
// second - first). Pure functions, no state.

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::eval {

// Most values a list may expand to; a progression with a tiny step is an input error.
inline constexpr int64_t kMaxListValues = 10000;

// InvalidArgument naming the offending item for an empty list or item, a non-number, a
// non-finite value, a misplaced "...", a step that does not reach the last value, or more than
// kMaxListValues values. Progression values are rounded to 1e-9 so 0.1 steps print as typed.
Result<std::vector<double>> parse_number_list(std::string_view text);

// The same, each value an integer in [min_value, max_value].
Result<std::vector<int32_t>> parse_int_list(std::string_view text, int32_t min_value,
                                            int32_t max_value);

}  // namespace strata::eval

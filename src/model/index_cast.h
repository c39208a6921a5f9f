#pragma once
// at(i): an int64_t index or size (the model code's type for them) as a std::vector subscript or
// std::size_t, without a sign-conversion warning at every use.

#include <cstddef>
#include <cstdint>

namespace strata::model {

inline size_t at(int64_t i) { return static_cast<size_t>(i); }

}  // namespace strata::model

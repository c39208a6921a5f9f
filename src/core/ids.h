#pragma once
// Strong ids: a BlockId cannot be passed where a SeqId is expected. Each wraps an int32_t and
// compares, hashes and prints like one.

#include <cstdint>
#include <functional>

namespace strata {

template <typename Tag>
struct StrongId {
  int32_t value = -1;

  constexpr StrongId() = default;
  constexpr explicit StrongId(int32_t v) : value(v) {}
  constexpr bool valid() const { return value >= 0; }
  constexpr auto operator<=>(const StrongId&) const = default;
};

// An index into the block pool. BlockId{0} is the reserved null block (kNullBlock).
using BlockId = StrongId<struct BlockIdTag>;
// A sequence: one stream of tokens with its own block table.
using SeqId = StrongId<struct SeqIdTag>;

inline constexpr BlockId kNullBlock{0};

}  // namespace strata

template <typename Tag>
struct std::hash<strata::StrongId<Tag>> {
  size_t operator()(const strata::StrongId<Tag>& id) const noexcept {
    return std::hash<int32_t>{}(id.value);
  }
};

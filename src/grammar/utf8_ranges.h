#pragma once
// Code point sets and their UTF-8 form: a regex class is a set of code points, and the byte
// automaton needs it as alternatives of byte-range sequences -- [a-z], or U+0080..U+07FF as
// [\xC2-\xDF][\x80-\xBF] -- so that exactly the UTF-8 encodings of the set's members match.

#include <cstdint>
#include <utility>
#include <vector>

namespace strata::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent ranges of Unicode scalar values (never a surrogate).
class CodePointSet {
 public:
  static CodePointSet of(uint32_t lo, uint32_t hi);  // lo <= hi; surrogates left out
  static CodePointSet all() { return of(0, kMaxCodePoint); }

  CodePointSet plus(const CodePointSet& other) const;
  CodePointSet minus(const CodePointSet& other) const;
  bool empty() const { return ranges_.empty(); }
  bool contains(uint32_t cp) const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  void add(uint32_t lo, uint32_t hi);  // keeps the invariant
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// One way through the bytes of an encoding: a byte range per position.
using Utf8Sequence = std::vector<std::pair<uint8_t, uint8_t>>;

// Byte-range sequences whose matches are exactly the UTF-8 encodings of the set's members.
std::vector<Utf8Sequence> utf8_sequences(const CodePointSet& set);

}  // namespace strata::grammar

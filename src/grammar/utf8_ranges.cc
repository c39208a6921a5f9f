#include "grammar/utf8_ranges.h"

#include <algorithm>
#include <string>

#include "core/utf8.h"

namespace strata::grammar {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// lo..hi, both of one encoded length: split until every byte position of the range covers a
// whole byte range independently of the others (the low continuation bytes of lo all 0x80 and of
// hi all 0xBF wherever a higher byte differs), then one sequence per piece.
void split(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  std::string a;
  utf8_append(a, lo);
  const auto n = static_cast<int>(a.size());
  for (int i = 1; i < n; ++i) {
    const uint32_t low_bits = (uint32_t{1} << (6 * i)) - 1;  // the i low continuation bytes
    if ((lo & ~low_bits) == (hi & ~low_bits)) continue;      // same higher bytes
    if ((lo & low_bits) != 0) {
      split(lo, lo | low_bits, out);
      split((lo | low_bits) + 1, hi, out);
      return;
    }
    if ((hi & low_bits) != low_bits) {
      split(lo, (hi & ~low_bits) - 1, out);
      split(hi & ~low_bits, hi, out);
      return;
    }
  }
  std::string b;
  utf8_append(b, hi);
  Utf8Sequence seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out.push_back(std::move(seq));
}

}  // namespace

CodePointSet CodePointSet::of(uint32_t lo, uint32_t hi) {
  CodePointSet s;
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return s;
  if (lo < kSurrogateLo && hi >= kSurrogateLo) {
    s.add(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) s.add(kSurrogateHi + 1, hi);
  } else if (lo >= kSurrogateLo && lo <= kSurrogateHi) {
    if (hi > kSurrogateHi) s.add(kSurrogateHi + 1, hi);
  } else {
    s.add(lo, hi);
  }
  return s;
}

void CodePointSet::add(uint32_t lo, uint32_t hi) {
  ranges_.emplace_back(lo, hi);
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

CodePointSet CodePointSet::plus(const CodePointSet& other) const {
  CodePointSet s = *this;
  for (const auto& [lo, hi] : other.ranges_) s.add(lo, hi);
  return s;
}

CodePointSet CodePointSet::minus(const CodePointSet& other) const {
  CodePointSet s;
  for (auto [lo, hi] : ranges_) {
    for (const auto& [olo, ohi] : other.ranges_) {
      if (ohi < lo || olo > hi) continue;
      if (olo > lo) s.add(lo, olo - 1);
      if (ohi >= hi) {
        lo = hi + 1;
        break;
      }
      lo = ohi + 1;
    }
    if (lo <= hi) s.add(lo, hi);
  }
  return s;
}

bool CodePointSet::contains(uint32_t cp) const {
  const auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), std::make_pair(cp, kMaxCodePoint + 1));
  return it != ranges_.begin() && std::prev(it)->second >= cp;
}

std::vector<Utf8Sequence> utf8_sequences(const CodePointSet& set) {
  std::vector<Utf8Sequence> out;
  constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (auto [lo, hi] : set.ranges()) {
    uint32_t start = lo;
    for (const uint32_t end : kLengthEnds) {
      if (start > hi) break;
      if (start > end) continue;
      split(start, std::min(hi, end), out);
      start = end + 1;
    }
  }
  return out;
}

}  // namespace strata::grammar

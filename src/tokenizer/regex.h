#pragma once
// Regex: one compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) used by the
// Split pre-tokenizers.
//
// Owns the compiled code. Invariants: the pattern compiled; searching needs valid UTF-8 input
// (the tokenizer repairs input before it gets here, so no UTF check is repeated). Const methods
// are thread-safe: each call allocates its own match data. Cost: find_all is linear in the text
// for the patterns tokenizers use; one small allocation per call.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::tokenizer {

class Regex {
 public:
  // Throws strata::Error with PCRE2's message and offset when the pattern does not compile.
  // literal: match `pattern` as a plain string.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Byte ranges [begin, end) of the non-overlapping, non-empty matches, left to right.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace strata::tokenizer

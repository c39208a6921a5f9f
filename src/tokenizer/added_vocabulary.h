#pragma once
// AddedVocabulary: tokenizer.json's "added_tokens", which are matched in the text before any
// normalization or BPE. Tokens with normalized=false are matched on the raw text; the others on
// each normalized piece (their pattern is the token normalized the same way). Matching is
// leftmost-longest and non-overlapping; lstrip/rstrip swallow neighbouring whitespace;
// single_word requires word boundaries.
//
// Owns the tokens and two byte tries (raw, normalized). Invariants: every trie terminal names a
// token of this vocabulary. Immutable after construction; split() is thread-safe. Cost: split()
// is O(text bytes x longest token) in the worst case, one table lookup per byte otherwise.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/normalizer.h"

namespace strata::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool normalized = false;
  bool lstrip = false, rstrip = false, single_word = false;
};

// A piece of text: either an added token (token_id >= 0) or text still to be encoded.
struct TextSplit {
  size_t begin, end;  // byte range in the string that was split
  int32_t token_id;   // -1 for text
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  static AddedVocabulary from_json(const nlohmann::json& added_tokens, const Normalizer& normalizer,
                                   const std::string& where);

  // Splits `text` by the raw (normalized=false) or the normalized tokens.
  std::vector<TextSplit> split(std::string_view text, bool normalized) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie with one hash map for all edges, keyed by (node << 8 | byte).
  struct Trie {
    std::unordered_map<uint64_t, uint32_t> edges;
    std::vector<int32_t> terminal;  // token index per node, -1 when none
    bool first_byte[256] = {};
    void add(std::string_view pattern, int32_t token_idx);
    // Longest pattern starting at text[pos]: its token index and length, or -1.
    int32_t longest(std::string_view text, size_t pos, size_t& length) const;
  };
  bool boundary_ok(const AddedToken& t, std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  Trie raw_, normalized_;
};

}  // namespace strata::tokenizer

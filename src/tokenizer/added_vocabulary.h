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
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
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

  // Splits `text` by the raw (normalized=false) or the normalized tokens. No token may span a
  // break (sorted byte offsets into `text`: a match [b, e) needs no break with b < break < e);
  // with match_special false, tokens marked special are not matched at all (Hugging Face's
  // split_special_tokens).
  std::vector<TextSplit> split(std::string_view text, bool normalized,
                               std::span<const size_t> breaks = {},
                               bool match_special = true) const;
  // Breaks (sorted offsets into `text`) that keep `text` from forming a special token, on its own
  // or with whatever text is put around it: one after the first character of each special token
  // it holds, 0 when it begins with a proper suffix of one, text.size() when it ends with a proper
  // prefix. Cost: O(text bytes x longest special token).
  std::vector<size_t> special_breaks(std::string_view text) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie with one hash map for all edges, keyed by (node << 8 | byte).
  struct Trie {
    std::unordered_map<uint64_t, uint32_t> edges;
    std::vector<int32_t> terminal;  // token index per node, -1 when none
    std::vector<bool> inner;        // whether an edge leaves the node
    bool first_byte[256] = {};
    void add(std::string_view pattern, int32_t token_idx);
    // Longest pattern in text[pos, end): its token index and length, or -1. With `tokens` set,
    // patterns of special tokens are skipped.
    int32_t longest(std::string_view text, size_t pos, size_t end, size_t& length,
                    const std::vector<AddedToken>* skip_special = nullptr) const;
  };
  bool boundary_ok(const AddedToken& t, std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  Trie raw_, normalized_;
  // For special_breaks: the special tokens' raw text, and every proper suffix of it.
  Trie special_;
  std::unordered_set<std::string> special_suffixes_;
  size_t longest_special_ = 0;
};

}  // namespace strata::tokenizer

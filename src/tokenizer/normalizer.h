#pragma once
// Normalizer: the text normalization of tokenizer.json's "normalizer" (NFC/NFD/NFKC/NFKD,
// Prepend, Replace with a literal pattern, Lowercase, Strip, and Sequences of them), applied to
// each piece of text between added tokens.
//
// Owns its list of steps. Invariants: the steps are exactly the supported leaves of the JSON
// tree, flattened in order. Immutable after construction, so apply() is safe from any thread.
// Cost: one pass (and one copy) of the text per step; Unicode normal forms go through utf8proc.

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace strata::tokenizer {

// tokenizer.json's Replace with a literal pattern (a normalizer and a decoder step): every
// occurrence of `pattern`, left to right without overlap, replaced by `with`; an empty pattern
// replaces nothing.
std::string replace_all(std::string_view text, std::string_view pattern, std::string_view with);

class Normalizer {
 public:
  // An empty normalizer (null in tokenizer.json): apply() returns its input.
  Normalizer() = default;
  // Throws strata::Error for an unknown or malformed normalizer; `where` names the file.
  // Recurses once per nested Sequence: `j` must come from parse_json_file (core/json_input.h),
  // whose depth limit bounds the recursion.
  static Normalizer from_json(const nlohmann::json& j, const std::string& where);

  bool empty() const { return steps_.empty(); }
  // `text` must be valid UTF-8; the result is valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace, kLowercase, kStrip };
  struct Step {
    Kind kind;
    std::string a = {};                // Prepend: the prefix; Replace: the pattern
    std::string b = {};                // Replace: the content
    bool left = false, right = false;  // Strip
  };
  static void add_json(const nlohmann::json& j, const std::string& where, std::vector<Step>& out);

  std::vector<Step> steps_;
};

}  // namespace strata::tokenizer

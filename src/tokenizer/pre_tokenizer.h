#pragma once
// PreTokenizer: tokenizer.json's "pre_tokenizer", which cuts normalized text into the pieces
// that BPE encodes independently. Supported: Split (regex or string pattern, every behavior,
// `invert`), ByteLevel (optional prefix space and GPT-2 regex), Metaspace (prepend_scheme,
// split), Whitespace, WhitespaceSplit, Digits, and Sequences of them.
//
// Owns the compiled regexes. Invariants: steps run in file order; a ByteLevel step only marks
// that pieces go to the model in the byte-level alphabet (byte_level()), which the tokenizer
// applies after the last step. Immutable after construction; run() is thread-safe. Cost: one
// regex scan per Split step plus a copy of each piece.

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace strata::tokenizer {

class PreTokenizer {
 public:
  PreTokenizer() = default;  // null in tokenizer.json: the whole text is one piece
  // Recurses once per nested Sequence: `j` must come from parse_json_file (core/json_input.h),
  // whose depth limit bounds the recursion.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);

  // Appends the pieces of `text` to `pieces` (never empty strings). `at_text_start`: the text
  // starts at offset 0 of the user's input (Metaspace's prepend_scheme "first").
  void run(std::string_view text, bool at_text_start, std::vector<std::string>& pieces) const;
  bool byte_level() const { return byte_level_; }

 private:
  enum class Kind { kSplit, kByteLevelPrefix, kMetaspace };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> regex = {};  // Split
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    std::string replacement = {};  // Metaspace
    Prepend prepend = Prepend::kAlways;
    bool split = true;
  };
  static void add_json(const nlohmann::json& j, const std::string& where, std::vector<Step>& out,
                       bool& byte_level);
  static Behavior parse_behavior(const std::string& name, const std::string& ctx);
  static void split(const Step& step, std::string_view piece, std::vector<std::string>& out);
  static void metaspace(const Step& step, std::string_view piece, bool first,
                        std::vector<std::string>& out);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace strata::tokenizer

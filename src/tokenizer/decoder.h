#pragma once
// Decoder: tokenizer.json's "decoder", which turns token strings back into text. Supported:
// ByteLevel, Metaspace, Replace (literal pattern), ByteFallback, Fuse, Strip, and Sequences.
// Each step maps the list of token strings to a new list, as Hugging Face's decode_chain does;
// the result is the concatenation of the final list.
//
// Owns its steps. Immutable after construction; decode() is thread-safe. Cost: linear in the
// total length of the tokens, a few copies per step.

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace strata::tokenizer {

class Decoder {
 public:
  Decoder() = default;  // null in tokenizer.json: tokens are joined with spaces
  // Recurses once per nested Sequence: `j` must come from parse_json_file (core/json_input.h),
  // whose depth limit bounds the recursion.
  static Decoder from_json(const nlohmann::json& j, const std::string& where);

  // Always valid UTF-8: invalid byte sequences become U+FFFD.
  std::string decode(std::vector<std::string> tokens) const;
  // The same bytes before that repair (a byte-level token may hold part of a character).
  std::string decode_bytes(std::vector<std::string> tokens) const;

 private:
  enum class Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip };
  struct Step {
    Kind kind;
    std::string a = {},
                b = {};   // Replace: pattern, content; Metaspace: replacement; Strip: content
    bool prepend = true;  // Metaspace: prepend_scheme != never
    size_t start = 0, stop = 0;  // Strip
  };
  static void add_json(const nlohmann::json& j, const std::string& where, std::vector<Step>& out);
  // raw: byte-fallback runs stay raw bytes (decode_bytes); decode() repairs the whole text after.
  static void apply(const Step& step, std::vector<std::string>& tokens, bool raw);

  std::vector<Step> steps_;
  bool null_ = true;
};

}  // namespace strata::tokenizer

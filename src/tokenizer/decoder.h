#pragma once
// Decoder: tokenizer.json's "decoder", which turns token strings back into text. Supported:
// ByteLevel, Metaspace, Replace (literal pattern), ByteFallback, Fuse, Strip, and Sequences.
// Each step maps the list of token strings to a new list, as Hugging Face's decode_chain does;
// the result is the concatenation of the final list.
//
// Streamable: what tokens add in the middle of a text is what the chain gives for them alone
// with at_text_start and at_text_end false (StreamDecoder decodes its windows of ids that way).
// So each step acts on one token, or, after a Fuse or ByteLevel has joined them, on one
// character of the joined text at a time; from_json refuses a step that would rewrite text
// across the joins (a Replace of a longer pattern, a ByteFallback, a second ByteLevel), and
// Metaspace's replacement and Strip's content must be one character, as in Hugging Face.
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

  // Always valid UTF-8: invalid byte sequences become U+FFFD. at_text_start false: the tokens
  // continue a text, so the steps that act only at its start are skipped (Metaspace's removal
  // of the first token's leading space; after a Fuse or ByteLevel, Strip's `start`);
  // at_text_end false: more may follow, so after a Fuse or ByteLevel Strip's `stop` is skipped.
  std::string decode(std::vector<std::string> tokens, bool at_text_start = true,
                     bool at_text_end = true) const;
  // The same bytes before that repair (a byte-level token may hold part of a character).
  std::string decode_bytes(std::vector<std::string> tokens, bool at_text_start = true,
                           bool at_text_end = true) const;
  // Whether at_text_end can change a decode: a Strip with a `stop` after a Fuse or ByteLevel.
  bool acts_at_text_end() const { return acts_at_text_end_; }

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
  // joined: a Fuse or ByteLevel ran before, so tokens holds the whole text as one string.
  static void apply(const Step& step, std::vector<std::string>& tokens, bool raw,
                    bool at_text_start, bool at_text_end, bool joined);

  std::vector<Step> steps_;
  bool null_ = true;
  bool acts_at_text_end_ = false;
};

}  // namespace strata::tokenizer

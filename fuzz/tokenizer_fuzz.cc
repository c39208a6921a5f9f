// libFuzzer target: loading tokenizer.json and encoding/decoding text with it.
// Input "<tokenizer.json>\0\0<text>" loads the first part and encodes the second; any other input
// is text for two built-in tokenizers (byte-level with added tokens, SentencePiece-style with
// byte_fallback). A strata::Error is the expected way to reject a file; any other exception, a
// crash, a sanitizer report, or a broken invariant (an id without a token, a decode that is not
// UTF-8, streaming deltas that do not add up to the decode) is a bug.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using strata::tokenizer::StreamDecoder;
using strata::tokenizer::Tokenizer;

constexpr const char* kByteLevel = R"({"added_tokens": [
  {"id": 7, "content": "<|end|>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
  {"id": 8, "content": "<think>", "special": false, "normalized": true, "lstrip": true, "rstrip": true, "single_word": false}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [7], "tokens": ["<|end|>"]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġa": 4, "Ġab": 5}, "merges": [["Ġ", "a"], ["a", "b"], ["Ġa", "b"]]}})";

constexpr const char* kSentencePiece = R"({"added_tokens": [
  {"id": 1, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null, "post_processor": null,
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
    "vocab": {"<unk>": 0, "<s>": 1, "▁": 2, "a": 3, "b": 4, "ab": 5, "▁ab": 6, "<0xC3>": 7, "<0xA9>": 8, "<0x0A>": 9},
    "merges": ["a b", "▁ ab"]}})";

void exercise(const Tokenizer& tok, std::string_view text) {
  for (const bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, special);
    for (const int32_t id : ids) STRATA_CHECK(tok.id_to_token(id).has_value(), "id has a token");
    const std::string decoded = tok.decode(ids, false);
    STRATA_CHECK(strata::tokenizer::is_valid_utf8(decoded), "decode is UTF-8");
    STRATA_CHECK(strata::tokenizer::is_valid_utf8(tok.decode(ids, true)), "decode is UTF-8");
    StreamDecoder stream(tok, false);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string delta = stream.push(id);
      STRATA_CHECK(strata::tokenizer::is_valid_utf8(delta), "delta is UTF-8");
      streamed += delta;
    }
    streamed += stream.flush();
    STRATA_CHECK(streamed == decoded, "streamed text equals the decode");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find(std::string_view("\0\0", 2));
  if (sep != std::string_view::npos) {
    try {
      const Tokenizer tok = Tokenizer::from_json(input.substr(0, sep), "", "fuzz");
      exercise(tok, input.substr(sep + 2));
    } catch (const strata::Error&) {
      // Rejected with a message: the expected outcome for a malformed file.
    }
    return 0;
  }
  static const Tokenizer byte_level = Tokenizer::from_json(kByteLevel, "", "fuzz");
  static const Tokenizer sentencepiece = Tokenizer::from_json(kSentencePiece, "", "fuzz");
  exercise(byte_level, input);
  exercise(sentencepiece, input);
  return 0;
}

#pragma once
// Tokenizer: a Hugging Face tokenizer.json (+ tokenizer_config.json) that encodes text to the ids
// the model was trained with and decodes ids back to text, matching the `tokenizers` library.
//
// Pipeline of encode(): repair invalid UTF-8 (each bad sequence -> U+FFFD); split out added tokens
// with normalized=false on the raw text; normalize each remaining piece; split out added tokens
// with normalized=true; pre-tokenize; map to the byte-level alphabet if the pre-tokenizer is
// ByteLevel; BPE each piece; with add_special_tokens, wrap the ids (post-processor).
//
// Special tokens: the post-processor of tokenizer.json, except for the tokenizer classes whose
// transformers implementation rebuilds it from tokenizer_config.json (LlamaTokenizer[Fast],
// CodeLlamaTokenizer[Fast], GemmaTokenizer[Fast]): there add_bos_token / add_eos_token decide,
// which is how DeepSeek-V3 gets its BOS.
//
// Owns every stage (vocabulary, merges, added tokens, compiled regexes) behind a pimpl. Invariants:
// every id encode() returns has a token (id_to_token succeeds). Immutable after load: all const
// methods are thread-safe. Cost: load parses the JSON once (~0.5 s for a 150k vocabulary);
// encode is linear in the text (regex + BPE, see docs/tokenizer.md for measured MB/s).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tokenizer {

class Tokenizer {
 public:
  // Reads dir/tokenizer.json and, when present, dir/tokenizer_config.json. Throws strata::Error
  // naming the file and the field for anything missing, malformed or unsupported.
  static Tokenizer load(const std::filesystem::path& dir);
  // The same from file contents (`config_json` may be empty); `origin` names them in errors.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json,
                             const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // encode() of text put together from trusted and untrusted parts: no added token may span a
  // break (sorted byte offsets into `text`), and a piece of text between added tokens that holds
  // a break matches no special token at all (normalized special tokens cannot be placed on the
  // raw offsets). Text with no special token across a break encodes exactly as encode() does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                              std::span<const size_t> breaks) const;
  // The breaks that keep `text` from forming a special token wherever it is put (see
  // AddedVocabulary::special_breaks); empty for text with no special-token text in or at its ends.
  std::vector<size_t> special_token_breaks(std::string_view text) const;
  // Unknown ids are skipped (as Hugging Face does); skip_special_tokens drops added tokens marked
  // special. The result is always valid UTF-8.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The bytes token id adds to the output when it follows other tokens: the decoder's chain
  // without its repair of invalid UTF-8 (a byte-level token may hold part of a character), and
  // without what the chain does only at a text's start or end (Metaspace's or Strip's removal of
  // the first space, Strip's stop). Empty for special tokens and unknown ids. What constrained
  // decoding walks (src/grammar).
  std::string token_bytes(int32_t id) const;

  // One past the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  // tokenizer_config.json's chat_template (a Jinja source), "" when absent.
  const std::string& chat_template() const;
  // Replaces it (serve --chat-template). Not thread-safe: call before the tokenizer is shared.
  void set_chat_template(std::string source);

  // The stages; defined in tokenizer_impl.h, which only src/tokenizer includes.
  struct Impl;

 private:
  friend class StreamDecoder;
  struct WordCache;
  explicit Tokenizer(std::unique_ptr<const Impl> impl);
  // decode() of ids at the start and/or end of a text, or neither (a StreamDecoder's window):
  // the decoder's steps for the ends that are not there are skipped (Decoder::decode).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens, bool at_text_start,
                     bool at_text_end) const;
  void encode_text(std::string_view text, bool at_text_start, bool match_special,
                   WordCache& cache, std::vector<int32_t>& ids) const;

  std::unique_ptr<const Impl> impl_;
  std::string chat_template_;  // the config's, or set_chat_template's
};

// StreamDecoder: turns ids arriving one at a time into text deltas for streaming, such that the
// concatenated deltas equal decode(all ids) whenever that ends in complete characters, and no
// delta ever ends inside a UTF-8 character (held back until the character completes).
//
// Owns the ids seen so far; references the tokenizer, which must outlive it. Not thread-safe
// (one per sequence). Cost: each push() decodes the few ids since the last emitted boundary
// (three times: before and after the id, and as the end of the text).
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);
  // Returns the new text made final by `id` (often empty while a character is incomplete).
  std::string push(int32_t id);
  // Whatever is still held back (incomplete characters become U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids before this are context only
  size_t read_offset_ = 0;    // text up to this id has been emitted
};

}  // namespace strata::tokenizer

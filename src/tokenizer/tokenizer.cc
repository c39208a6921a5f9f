#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {

Tokenizer::Tokenizer(std::unique_ptr<const Impl> impl)
    : impl_(std::move(impl)), chat_template_(impl_->chat_template) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// Ids of the pieces already encoded by one encode() call: natural text repeats its words, and a
// piece's ids depend on the piece alone. Local to the call, so encode() stays thread-safe.
struct Tokenizer::WordCache {
  static constexpr size_t kMaxPieceBytes = 48;
  static constexpr size_t kMaxEntries = 1 << 16;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> spans;
  std::vector<int32_t> ids;  // the cached ids, back to back

  void encode(const BpeModel& model, const std::string& piece, std::vector<int32_t>& out) {
    if (piece.size() > kMaxPieceBytes) {
      model.encode_word(piece, out);
      return;
    }
    if (const auto it = spans.find(piece); it != spans.end()) {
      out.insert(out.end(), ids.begin() + it->second.first,
                 ids.begin() + it->second.first + it->second.second);
      return;
    }
    const size_t start = out.size();
    model.encode_word(piece, out);
    if (spans.size() < kMaxEntries) {
      spans.emplace(piece,
                    std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(ids.size()),
                                                  static_cast<uint32_t>(out.size() - start)));
      ids.insert(ids.end(), out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
    }
  }
};

// Text between added tokens: normalize, split out normalized added tokens, pre-tokenize, BPE.
void Tokenizer::encode_text(std::string_view text, bool at_text_start, bool match_special,
                            WordCache& cache, std::vector<int32_t>& ids) const {
  const Impl& m = *impl_;
  const std::string normalized = m.normalizer.apply(text);
  std::vector<std::string> pieces;
  for (const TextSplit& s : m.added.split(normalized, /*normalized=*/true, {}, match_special)) {
    if (s.token_id >= 0) {
      ids.push_back(s.token_id);
      continue;
    }
    pieces.clear();
    m.pre_tokenizer.run(std::string_view(normalized).substr(s.begin, s.end - s.begin),
                        at_text_start && s.begin == 0, pieces);
    for (const std::string& piece : pieces) cache.encode(m.model, piece, ids);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return encode(text, add_special_tokens, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                       std::span<const size_t> breaks) const {
  STRATA_CHECK(std::is_sorted(breaks.begin(), breaks.end()), "encode: breaks must be sorted");
  std::string repaired;
  std::vector<size_t> moved;
  if (!is_valid_utf8(text)) {
    // Repaired piece by piece between breaks, so each break keeps its place.
    size_t from = 0;
    for (const size_t b : breaks) {
      repaired += utf8_lossy(text.substr(from, std::min(b, text.size()) - from));
      moved.push_back(repaired.size());
      from = std::min(b, text.size());
    }
    repaired += utf8_lossy(text.substr(from));
    text = repaired;
    breaks = moved;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  WordCache cache;
  for (const TextSplit& s : impl_->added.split(text, /*normalized=*/false, breaks)) {
    if (s.token_id >= 0) {
      ids.push_back(s.token_id);
    } else if (s.end > s.begin) {
      const auto inside = std::upper_bound(breaks.begin(), breaks.end(), s.begin);
      const bool holds_break = inside != breaks.end() && *inside < s.end;
      encode_text(text.substr(s.begin, s.end - s.begin), s.begin == 0, !holds_break, cache, ids);
    }
  }
  return add_special_tokens ? impl_->post_processor.apply(std::move(ids)) : ids;
}

std::vector<size_t> Tokenizer::special_token_breaks(std::string_view text) const {
  return impl_->added.special_breaks(text);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return decode(ids, skip_special_tokens, /*at_text_start=*/true, /*at_text_end=*/true);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens,
                              bool at_text_start, bool at_text_end) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* t = impl_->added.find_id(id)) {
      if (!(skip_special_tokens && t->special)) tokens.push_back(t->content);
    } else if (const std::string* s = impl_->model.id_to_token(id)) {
      tokens.push_back(*s);
    }
  }
  return impl_->decoder.decode(std::move(tokens), at_text_start, at_text_end);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  std::string token;
  if (const AddedToken* t = impl_->added.find_id(id)) {
    if (t->special) return {};
    token = t->content;
  } else if (const std::string* s = impl_->model.id_to_token(id)) {
    token = *s;
  } else {
    return {};
  }
  // Mid-text: the chain's steps that act only at the text's ends are skipped.
  return impl_->decoder.decode_bytes({std::move(token)}, /*at_text_start=*/false,
                                     /*at_text_end=*/false);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* t = impl_->added.find_content(token)) return t->id;
  const int32_t id = impl_->model.token_to_id(token);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = impl_->added.find_id(id)) return t->content;
  if (const std::string* s = impl_->model.id_to_token(id)) return *s;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = impl_->added.find_id(id);
  return t != nullptr && t->special;
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_id; }
const std::string& Tokenizer::chat_template() const { return chat_template_; }

void Tokenizer::set_chat_template(std::string source) { chat_template_ = std::move(source); }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

// Decodes a window that starts a few ids back (the ids of the last delta, so a character they
// began can complete) and emits what the new id added, unless the text ends in U+FFFD (a
// character may still be incomplete) or in what the decoder strips from the end of a text (a
// later id may keep it). Emitted text is final: the window is decoded as the middle of the text
// (Decoder::decode), except that the first window is its start, where Metaspace or Strip remove
// leading spaces as they do for the whole text.
std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::span<const int32_t> window = all.subspan(prefix_offset_);
  const bool at_start = prefix_offset_ == 0;
  const std::string before = tokenizer_.decode(window.first(read_offset_ - prefix_offset_),
                                               skip_special_, at_start, /*at_text_end=*/false);
  const std::string now = tokenizer_.decode(window, skip_special_, at_start, false);
  if (now.size() <= before.size()) return {};
  // Held back: a character still incomplete, or what the decoder would strip from a text's end
  // (a decoder without such a step needs no third decode to know there is none).
  const bool incomplete =
      (now.size() >= kReplacementChar.size() &&
       now.compare(now.size() - kReplacementChar.size(), std::string::npos, kReplacementChar) ==
           0) ||
      (tokenizer_.impl_->decoder.acts_at_text_end() &&
       tokenizer_.decode(window, skip_special_, at_start, /*at_text_end=*/true).size() !=
           now.size());
  if (incomplete) return {};
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return now.substr(before.size());
}

std::string StreamDecoder::flush() {
  const std::span<const int32_t> window = std::span<const int32_t>(ids_).subspan(prefix_offset_);
  const bool at_start = prefix_offset_ == 0;
  const std::string before = tokenizer_.decode(window.first(read_offset_ - prefix_offset_),
                                               skip_special_, at_start, /*at_text_end=*/false);
  const std::string now = tokenizer_.decode(window, skip_special_, at_start, /*at_text_end=*/true);
  prefix_offset_ = read_offset_ = ids_.size();
  return now.size() > before.size() ? now.substr(before.size()) : std::string();
}

}  // namespace strata::tokenizer

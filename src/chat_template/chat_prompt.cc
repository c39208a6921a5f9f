#include "chat_template/chat_prompt.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata::chat_template {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kMark = "\xEF\xB7\x90";  // U+FDD0

// `text` without U+FDD0, with the marks that keep its special-token text plain.
std::string mark(const tokenizer::Tokenizer& tok, std::string_view text) {
  std::string clean;
  for (size_t at; (at = text.find(kMark)) != std::string_view::npos;) {
    clean.append(text.substr(0, at));
    text.remove_prefix(at + kMark.size());
  }
  clean.append(text);
  const std::vector<size_t> breaks = tok.special_token_breaks(clean);
  if (breaks.empty()) return clean;
  std::string out;
  out.reserve(clean.size() + breaks.size() * kMark.size());
  size_t from = 0;
  for (const size_t b : breaks) {
    out.append(clean, from, b - from);
    out.append(kMark);
    from = b;
  }
  out.append(clean, from);
  return out;
}

// Marks every string in `value`, keys included. Recursion is bounded by the caller's nesting
// (the server refuses bodies deeper than 64).
ordered_json marked(const tokenizer::Tokenizer& tok, const ordered_json& value) {
  if (value.is_string()) return mark(tok, value.get_ref<const std::string&>());
  if (value.is_array()) {
    ordered_json out = ordered_json::array();
    for (const ordered_json& v : value) out.push_back(marked(tok, v));
    return out;
  }
  if (value.is_object()) {
    ordered_json out = ordered_json::object();
    for (auto it = value.begin(); it != value.end(); ++it)
      out[mark(tok, it.key())] = marked(tok, it.value());
    return out;
  }
  return value;
}

}  // namespace

Result<std::vector<int32_t>> encode_chat_prompt(const tokenizer::Tokenizer& tokenizer,
                                                const ordered_json& messages,
                                                const ordered_json& options,
                                                const ChatPromptConfig& config) {
  if (config.special_tokens_in_content) {
    Result<std::string> text =
        render_tokenizer_chat_template(tokenizer, messages, options, config.limits);
    if (!text.ok()) return text.status();
    return tokenizer.encode(*text, /*add_special_tokens=*/false);
  }
  Result<std::string> text = render_tokenizer_chat_template(
      tokenizer, marked(tokenizer, messages), marked(tokenizer, options), config.limits);
  if (!text.ok()) return text.status();
  // Repaired first, so the marks' offsets hold in the text that is encoded.
  std::string rendered =
      tokenizer::is_valid_utf8(*text) ? std::move(*text) : tokenizer::utf8_lossy(*text);
  std::string plain;
  std::vector<size_t> breaks;
  std::string_view rest = rendered;
  for (size_t at; (at = rest.find(kMark)) != std::string_view::npos;) {
    plain.append(rest.substr(0, at));
    breaks.push_back(plain.size());
    rest.remove_prefix(at + kMark.size());
  }
  if (breaks.empty()) return tokenizer.encode(rendered, /*add_special_tokens=*/false);
  plain.append(rest);
  return tokenizer.encode(plain, /*add_special_tokens=*/false, breaks);
}

}  // namespace strata::chat_template

#include "tokenizer/added_vocabulary.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "core/quote.h"
#include "tokenizer/json_util.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {

void AddedVocabulary::Trie::add(std::string_view pattern, int32_t token_idx) {
  if (pattern.empty()) return;
  if (terminal.empty()) terminal.push_back(-1);
  uint32_t node = 0;
  for (const char c : pattern) {
    const uint64_t key = (uint64_t{node} << 8) | static_cast<uint8_t>(c);
    const auto [it, inserted] = edges.emplace(key, static_cast<uint32_t>(terminal.size()));
    if (inserted) terminal.push_back(-1);
    inner.resize(terminal.size());
    inner[node] = true;
    node = it->second;
  }
  if (terminal[node] < 0) terminal[node] = token_idx;  // the first token with this text wins
  first_byte[static_cast<uint8_t>(pattern[0])] = true;
}

int32_t AddedVocabulary::Trie::longest(std::string_view text, size_t pos, size_t end,
                                       size_t& length,
                                       const std::vector<AddedToken>* skip_special) const {
  int32_t best = -1;
  uint32_t node = 0;
  for (size_t i = pos; i < end; ++i) {
    const auto it = edges.find((uint64_t{node} << 8) | static_cast<uint8_t>(text[i]));
    if (it == edges.end()) break;
    node = it->second;
    if (terminal[node] >= 0 && !(skip_special != nullptr &&
                                 (*skip_special)[static_cast<size_t>(terminal[node])].special)) {
      best = terminal[node];
      length = i + 1 - pos;
    }
  }
  return best;
}

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& added_tokens,
                                           const Normalizer& normalizer, const std::string& where) {
  AddedVocabulary v;
  if (added_tokens.is_null()) return v;
  if (!added_tokens.is_array()) throw Error(where + ": 'added_tokens' must be an array");
  for (const nlohmann::json& j : added_tokens) {
    const std::string ctx = where + ": added_tokens entry";
    AddedToken t;
    t.content = json_string(j, "content", ctx);
    const nlohmann::json& id = json_field(j, "id", ctx);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= (int64_t{1} << 30)) {
      throw Error(ctx + " " + quote(t.content) + ": 'id' must be an integer in [0, 2^30)");
    }
    if (t.content.empty()) throw Error(ctx + " " + id.dump() + ": empty 'content'");
    t.id = id.get<int32_t>();
    t.special = json_bool(j, "special", false, ctx);
    t.normalized = json_bool(j, "normalized", !t.special, ctx);
    t.lstrip = json_bool(j, "lstrip", false, ctx);
    t.rstrip = json_bool(j, "rstrip", false, ctx);
    t.single_word = json_bool(j, "single_word", false, ctx);
    if (!is_valid_utf8(t.content)) throw Error(ctx + " " + id.dump() + ": content is not UTF-8");
    const auto idx = static_cast<int32_t>(v.tokens_.size());
    v.by_id_.emplace(t.id, static_cast<size_t>(idx));
    if (t.normalized) {
      v.normalized_.add(normalizer.apply(t.content), idx);
    } else {
      v.raw_.add(t.content, idx);
    }
    if (t.special) {
      v.special_.add(t.content, idx);
      for (size_t k = 1; k < t.content.size(); ++k) v.special_suffixes_.insert(t.content.substr(k));
      v.longest_special_ = std::max(v.longest_special_, t.content.size());
    }
    v.tokens_.push_back(std::move(t));
  }
  return v;
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  for (const AddedToken& t : tokens_) {
    if (t.content == content) return &t;
  }
  return nullptr;
}

namespace {

char32_t char_before(std::string_view s, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  char32_t cp;
  utf8_decode(s, start, cp);
  return cp;
}

}  // namespace

bool AddedVocabulary::boundary_ok(const AddedToken& t, std::string_view text, size_t begin,
                                  size_t end) const {
  if (!t.single_word) return true;
  const bool start_ok = begin == 0 || !is_unicode_alphanumeric(char_before(text, begin));
  char32_t next = 0;
  if (end < text.size()) utf8_decode(text, end, next);
  const bool stop_ok = end == text.size() || !is_unicode_alphanumeric(next);
  return start_ok && stop_ok;
}

std::vector<TextSplit> AddedVocabulary::split(std::string_view text, bool normalized,
                                              std::span<const size_t> breaks,
                                              bool match_special) const {
  const Trie& trie = normalized ? normalized_ : raw_;
  std::vector<TextSplit> out;
  size_t done = 0;        // end of the last emitted split
  size_t next_break = 0;  // index of the first break after pos
  for (size_t pos = 0; pos < text.size() && !trie.terminal.empty();) {
    while (next_break < breaks.size() && breaks[next_break] <= pos) ++next_break;
    const size_t limit =
        next_break < breaks.size() ? std::min(breaks[next_break], text.size()) : text.size();
    size_t length = 0;
    const int32_t idx =
        trie.first_byte[static_cast<uint8_t>(text[pos])]
            ? trie.longest(text, pos, limit, length, match_special ? nullptr : &tokens_)
            : -1;
    if (idx < 0 || !boundary_ok(tokens_[idx], text, pos, pos + length)) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[idx];
    size_t begin = pos, end = pos + length;
    while (t.lstrip && begin > done && is_unicode_whitespace(char_before(text, begin))) {
      do --begin;
      while ((static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80);
    }
    while (t.rstrip && end < text.size()) {
      char32_t cp;
      const size_t n = utf8_decode(text, end, cp);
      if (!is_unicode_whitespace(cp)) break;
      end += n;
    }
    if (begin > done) out.push_back({done, begin, -1});
    out.push_back({begin, end, t.id});
    done = end;
    pos = end;
  }
  if (done < text.size() || out.empty()) out.push_back({done, text.size(), -1});
  return out;
}

std::vector<size_t> AddedVocabulary::special_breaks(std::string_view text) const {
  std::vector<size_t> breaks;
  if (special_.terminal.empty() || text.empty()) return breaks;
  for (size_t k = 1; k < longest_special_ && k <= text.size(); ++k) {
    if (special_suffixes_.contains(std::string(text.substr(0, k)))) {
      breaks.push_back(0);
      break;
    }
  }
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!special_.first_byte[static_cast<uint8_t>(text[pos])]) continue;
    uint32_t node = 0;
    size_t i = pos;
    bool holds = false;
    for (; i < text.size(); ++i) {
      const auto it = special_.edges.find((uint64_t{node} << 8) | static_cast<uint8_t>(text[i]));
      if (it == special_.edges.end()) break;
      node = it->second;
      holds = holds || special_.terminal[node] >= 0;
    }
    if (holds) {
      char32_t cp;
      breaks.push_back(pos + utf8_decode(text, pos, cp));
    }
    // A proper prefix of a special token: the next text could complete it.
    if (i == text.size() && special_.inner[node]) breaks.push_back(text.size());
  }
  std::sort(breaks.begin(), breaks.end());
  breaks.erase(std::unique(breaks.begin(), breaks.end()), breaks.end());
  return breaks;
}

}  // namespace strata::tokenizer

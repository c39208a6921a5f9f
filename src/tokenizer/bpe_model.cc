#include "tokenizer/bpe_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "core/quote.h"
#include "tokenizer/json_util.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {

BpeModel BpeModel::from_json(const nlohmann::json& model, bool byte_level,
                             const std::string& where) {
  const std::string ctx = where + ": model";
  const std::string type =
      model.is_object() && !model.contains("type") ? "BPE" : json_string(model, "type", ctx);
  if (type != "BPE") {
    throw Error(ctx + ": model type " + quote(type) + " is not supported (only BPE)");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0) {
    throw Error(ctx + ": BPE dropout is not supported for inference");
  }
  BpeModel m;
  const nlohmann::json& vocab = json_field(model, "vocab", ctx);
  if (!vocab.is_object()) throw Error(ctx + ": 'vocab' must be an object of token -> id");
  m.vocab_.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() >= (int64_t{1} << 30)) {
      throw Error(ctx + ": vocab id of " + quote(token) + " must be an integer in [0, 2^30)");
    }
    const auto id = id_json.get<int32_t>();
    if (static_cast<size_t>(id) >= m.id_to_token_.size()) {
      m.id_to_token_.resize(static_cast<size_t>(id) + 1);
      m.has_id_.resize(static_cast<size_t>(id) + 1);
    }
    if (m.has_id_[id]) throw Error(ctx + ": vocab id " + std::to_string(id) + " is used twice");
    m.has_id_[id] = true;
    m.id_to_token_[id] = token;
    m.vocab_.emplace(token, id);
  }
  m.fuse_unk_ = json_bool(model, "fuse_unk", false, ctx);
  m.byte_fallback_ = json_bool(model, "byte_fallback", false, ctx);
  m.ignore_merges_ = json_bool(model, "ignore_merges", false, ctx);
  m.continuing_subword_prefix_ = json_optional_string(model, "continuing_subword_prefix", ctx);
  m.end_of_word_suffix_ = json_optional_string(model, "end_of_word_suffix", ctx);
  const std::string unk = json_optional_string(model, "unk_token", ctx);
  if (!unk.empty()) {
    m.unk_id_ = m.token_to_id(unk);
    if (m.unk_id_ < 0) throw Error(ctx + ": unk_token " + quote(unk) + " is not in the vocab");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m.byte_ids_[b] = m.token_to_id(name);
  }
  m.byte_level_ = byte_level;
  m.byte_fast_path_ =
      byte_level && m.continuing_subword_prefix_.empty() && m.end_of_word_suffix_.empty();
  for (int b = 0; b < 256; ++b) {
    m.byte_level_ids_[b] = m.token_to_id(byte_to_unicode()[b]);
    m.byte_fast_path_ = m.byte_fast_path_ && m.byte_level_ids_[b] >= 0;
  }
  m.load_merges(json_array(model, "merges", ctx), ctx);
  return m;
}

// Merges come as "a b" strings (the legacy format) or as ["a", "b"] pairs (tokenizers >= 0.20);
// a merge's rank is its index.
void BpeModel::insert_merge(uint64_t key, Merge merge) {
  const size_t mask = merge_slots_.size() - 1;
  for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; i = (i + 1) & mask) {
    if (merge_slots_[i].key == key) return;  // a repeated merge keeps its first rank
    if (merge_slots_[i].key == kEmptyKey) {
      merge_slots_[i] = {key, merge};
      return;
    }
  }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  if (merge_slots_.empty()) return nullptr;
  const uint64_t key = pair_key(a, b);
  const size_t mask = merge_slots_.size() - 1;
  for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; i = (i + 1) & mask) {
    const MergeSlot& slot = merge_slots_[i];
    if (slot.key == key) return &slot.merge;
    if (slot.key == kEmptyKey) return nullptr;
  }
}

void BpeModel::load_merges(const nlohmann::json& merges, const std::string& ctx) {
  size_t capacity = 16;
  merge_shift_ = 60;
  while (capacity < 2 * merges.size()) capacity *= 2, --merge_shift_;
  merge_slots_.assign(capacity, MergeSlot{});
  std::string a, b;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& m = merges[rank];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw Error(ctx + ": merge " + std::to_string(rank) + " " + quote(s) + " is not 'a b'");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw Error(ctx + ": merge " + std::to_string(rank) + " must be \"a b\" or [\"a\", \"b\"]");
    }
    const int32_t ia = token_to_id(a), ib = token_to_id(b), merged = token_to_id(a + b);
    if (ia < 0 || ib < 0 || merged < 0) {
      throw Error(ctx + ": merge " + std::to_string(rank) + " (" + quote(a) + ", " + quote(b) +
                  ") uses a token that is not in the vocab");
    }
    insert_merge(pair_key(ia, ib), Merge{static_cast<int32_t>(rank), merged});
  }
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_bound() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

// One symbol per character; characters missing from the vocab become <0xXX> byte tokens
// (byte_fallback) or the unknown token, fused when fuse_unk is set. A pending unknown token is
// flushed only by the next known character or the end, which is where Hugging Face puts it.
void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  int32_t pending_unk = -1;
  const auto add = [&](int32_t id) { symbols.push_back({id, -1, -1, true}); };
  std::string with_affix;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::max<size_t>(1, utf8_valid_length(word, i));
    std::string_view s = word.substr(i, n);
    const bool first = i == 0;
    i += n;
    if ((!first && !continuing_subword_prefix_.empty()) ||
        (i >= word.size() && !end_of_word_suffix_.empty())) {
      with_affix = (first ? "" : continuing_subword_prefix_) + std::string(s) +
                   (i >= word.size() ? end_of_word_suffix_ : "");
      s = with_affix;
    }
    if (const int32_t id = token_to_id(s); id >= 0) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(id);
      continue;
    }
    if (byte_fallback_ && std::all_of(s.begin(), s.end(), [&](char c) {
          return byte_ids_[static_cast<uint8_t>(c)] >= 0;
        })) {
      for (const char c : s) add(byte_ids_[static_cast<uint8_t>(c)]);
      continue;
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
  for (size_t k = 0; k < symbols.size(); ++k) {
    symbols[k].prev = static_cast<int32_t>(k) - 1;
    symbols[k].next = k + 1 < symbols.size() ? static_cast<int32_t>(k) + 1 : -1;
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  std::string mapped;
  if (byte_level_ && (ignore_merges_ || !byte_fast_path_)) {
    for (const char c : word) mapped += byte_to_unicode()[static_cast<uint8_t>(c)];
  }
  if (ignore_merges_) {
    if (const int32_t id = token_to_id(byte_level_ ? std::string_view(mapped) : word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  if (byte_fast_path_) {
    for (size_t k = 0; k < word.size(); ++k) {
      const auto idx = static_cast<int32_t>(k);
      symbols.push_back({byte_level_ids_[static_cast<uint8_t>(word[k])], idx - 1,
                         k + 1 < word.size() ? idx + 1 : -1, true});
    }
  } else {
    initial_symbols(byte_level_ ? std::string_view(mapped) : word, symbols);
  }
  merge_symbols(symbols, out);
}

// Applies merges lowest rank first, leftmost on ties. A heap entry is stale when either of its
// symbols has changed since it was pushed; symbols only grow, so comparing ids detects that.
void BpeModel::merge_symbols(std::vector<Symbol>& symbols, std::vector<int32_t>& out) const {
  // Ordered by one integer: rank in the high half, position in the low half.
  struct Candidate {
    uint64_t order;
    int32_t left_id, right_id, merged_id;
    int32_t pos() const { return static_cast<int32_t>(order & 0xFFFFFFFFu); }
    bool operator>(const Candidate& o) const { return order > o.order; }
  };
  std::vector<Candidate> heap;
  heap.reserve(symbols.size());
  const auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const Merge* m = find_merge(symbols[pos].id, symbols[next].id);
    if (m == nullptr) return;
    heap.push_back({(static_cast<uint64_t>(m->rank) << 32) | static_cast<uint32_t>(pos),
                    symbols[pos].id, symbols[next].id, m->merged_id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(symbols.size()); ++k) push_pair(k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate top = heap.back();
    heap.pop_back();
    const int32_t pos = top.pos();
    Symbol& left = symbols[pos];
    if (!left.alive || left.id != top.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != top.right_id) continue;  // stale entry
    right.alive = false;
    left.id = top.merged_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace strata::tokenizer

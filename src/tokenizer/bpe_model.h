#pragma once
// BpeModel: tokenizer.json's "model" of type BPE: the vocabulary, the merge ranks, and the merge
// loop that turns one pre-tokenized piece into ids.
//
// Owns the vocabulary (token string <-> id) and the merges as a hash map from the id pair to
// (rank, merged id). Invariants: every merge's parts and result are in the vocabulary; ids are
// unique. Immutable after construction, so encode_word() is thread-safe. Cost: a piece of n
// characters costs n vocabulary lookups plus O(n log n) heap work for the merges (a lowest-rank
// pair first, leftmost on ties: the order Hugging Face's BPE applies them).

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::tokenizer {

// Hash for heterogeneous lookup: find() with a std::string_view builds no std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Throws strata::Error for a model that is not BPE or is malformed (unknown merge parts, ...).
  // byte_level: the pre-tokenizer is ByteLevel, so encode_word() receives raw bytes and the
  // vocabulary is in the GPT-2 byte alphabet.
  static BpeModel from_json(const nlohmann::json& model, bool byte_level, const std::string& where);

  // Appends the ids of `word`: raw bytes for a byte-level model, else text in the vocabulary's
  // alphabet (e.g. with ▁ for spaces).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // -1 when absent.
  int32_t token_to_id(std::string_view token) const;
  // nullptr when `id` is not in the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_bound() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // indices into the word's symbols, -1 at the ends
    bool alive;
  };
  // Open addressing, linear probing: the merge lookup is the inner loop of encoding.
  struct MergeSlot {
    uint64_t key = kEmptyKey;
    Merge merge{};
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  void load_merges(const nlohmann::json& merges, const std::string& where);
  void insert_merge(uint64_t key, Merge merge);
  const Merge* find_merge(int32_t a, int32_t b) const;
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_symbols(std::vector<Symbol>& symbols, std::vector<int32_t>& out) const;
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::vector<MergeSlot> merge_slots_;  // size a power of two, at most half full
  int merge_shift_ = 64;
  bool byte_level_ = false;
  bool byte_fast_path_ = false;  // byte-level, every byte has a token, no affixes
  int32_t byte_level_ids_[256];  // token of each byte's byte-level character
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t byte_ids_[256];  // <0xXX> tokens for byte_fallback, -1 when absent
};

}  // namespace strata::tokenizer

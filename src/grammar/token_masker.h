#pragma once
// Token masks: which of a vocabulary's tokens keep the output a valid prefix of a grammar's
// language (docs/grammar.md). A constrained sequence is a ByteDfa state; the sampler may pick a
// token only if walking its bytes from that state stays live, and the sequence's end (EOS) only
// where the state is accepting.
//
// VocabTrie: the vocabulary's token byte strings in a trie (children contiguous, sorted by
// byte), built once per tokenizer and shared by every grammar: tokens with a common prefix share
// the walk. TokenMasker: a request's view of one grammar's masks, each computed per DFA state by
// one walk of the trie that stops at the first dead byte and kept in the grammar's MaskCache,
// shared by all its requests (a sequence revisits the same few states, and requests of one schema
// the same ones). A TokenMasker is not thread-safe (one per sequence); the trie, the DFA and the
// cache may be shared.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/byte_dfa.h"

namespace strata::grammar {

class VocabTrie {
 public:
  // token_bytes[id]: token id's bytes; an empty one (a special token) is never in a mask.
  explicit VocabTrie(const std::vector<std::string>& token_bytes);

  int32_t vocab_size() const { return vocab_size_; }
  int32_t max_token_bytes() const { return max_token_bytes_; }  // the longest token's bytes
  const std::string& bytes(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }

  struct Node {
    uint8_t byte = 0;         // the edge into it
    int32_t first_child = 0;  // children: nodes [first_child, first_child + num_children)
    int32_t num_children = 0;
    int32_t first_token = 0;  // tokens ending here: ids_[first_token, first_token + num_tokens)
    int32_t num_tokens = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes_[0] is the root
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  int32_t vocab_size_ = 0;
  int32_t max_token_bytes_ = 0;
  std::vector<std::string> token_bytes_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
};

// A bitset over token ids: bit id of words[id / 64].
struct TokenMask {
  std::vector<uint64_t> words;
  bool allows(int32_t id) const {
    return (words[static_cast<size_t>(id) / 64] >> (static_cast<size_t>(id) % 64)) & 1;
  }
  int32_t count() const;
};

// The masks of one grammar (a DFA over a vocabulary) computed so far, shared by every request
// that uses the grammar: a state's mask is walked once, not once per request. Keeps the
// `capacity` most recently used; thread-safe (a mask is computed outside the lock, so two
// threads may both walk a state the first time, and one result is kept).
class MaskCache {
 public:
  explicit MaskCache(size_t capacity = 512) : capacity_(capacity == 0 ? 1 : capacity) {}

  std::shared_ptr<const TokenMask> find(int32_t state);
  void insert(int32_t state, std::shared_ptr<const TokenMask> mask);
  size_t size() const;

 private:
  using Lru = std::list<std::pair<int32_t, std::shared_ptr<const TokenMask>>>;
  size_t capacity_;
  mutable std::mutex mu_;
  Lru lru_;  // most recent first
  std::unordered_map<int32_t, Lru::iterator> index_;
};

class TokenMasker {
 public:
  // cache: the grammar's masks, shared with its other requests (null: this masker's own).
  // mask_keys (nullable): the DFA's liveness classes at the vocabulary's longest token
  // (ByteDfa::liveness_classes), under which the cache keeps one mask per class, not per state.
  TokenMasker(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const VocabTrie> vocab,
              std::shared_ptr<MaskCache> cache = nullptr,
              std::shared_ptr<const std::vector<int32_t>> mask_keys = nullptr);

  const ByteDfa& dfa() const { return *dfa_; }
  const VocabTrie& vocab() const { return *vocab_; }

  // The tokens allowed at state (none at kDead).
  std::shared_ptr<const TokenMask> mask(int32_t state);
  // The state after token id (kDead if it is not allowed there).
  int32_t advance(int32_t state, int32_t id) const { return dfa_->walk(state, vocab_->bytes(id)); }

  int64_t num_computed() const { return num_computed_; }  // masks this masker walked

 private:
  void compute(int32_t state, TokenMask& out) const;

  std::shared_ptr<const ByteDfa> dfa_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::shared_ptr<MaskCache> cache_;
  std::shared_ptr<const std::vector<int32_t>> mask_keys_;
  int64_t num_computed_ = 0;
};

}  // namespace strata::grammar

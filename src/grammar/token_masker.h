#pragma once
// Token masks: which of a vocabulary's tokens keep the output a valid prefix of a grammar's
// language (docs/grammar.md). A constrained sequence is a ByteDfa state; the sampler may pick a
// token only if walking its bytes from that state stays live, and the sequence's end (EOS) only
// where the state is accepting.
//
// VocabTrie: the vocabulary's token byte strings in a trie (children contiguous, sorted by
// byte), built once per tokenizer and shared by every grammar: tokens with a common prefix share
// the walk. TokenMasker: one grammar's masks, computed per DFA state by one walk of the trie that
// stops at the first dead byte, and kept for the states most recently asked (a sequence revisits
// the same few states). Not thread-safe (one per scheduler thread); the trie and the DFA it reads
// are immutable and may be shared.

#include <cstdint>
#include <list>
#include <memory>
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
  const std::string& bytes(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }

  struct Node {
    uint8_t byte = 0;          // the edge into it
    int32_t first_child = 0;   // children: nodes [first_child, first_child + num_children)
    int32_t num_children = 0;
    int32_t first_token = 0;   // tokens ending here: ids_[first_token, first_token + num_tokens)
    int32_t num_tokens = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes_[0] is the root
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  int32_t vocab_size_ = 0;
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

class TokenMasker {
 public:
  // Keeps up to cache_states masks (each vocab_size / 8 bytes).
  TokenMasker(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const VocabTrie> vocab,
              size_t cache_states = 256);

  const ByteDfa& dfa() const { return *dfa_; }
  const VocabTrie& vocab() const { return *vocab_; }

  // The tokens allowed at state (none at kDead).
  const TokenMask& mask(int32_t state);
  // The state after token id (kDead if it is not allowed there).
  int32_t advance(int32_t state, int32_t id) const { return dfa_->walk(state, vocab_->bytes(id)); }

  int64_t num_computed() const { return num_computed_; }  // masks walked (cache misses)

 private:
  void compute(int32_t state, TokenMask& out) const;

  std::shared_ptr<const ByteDfa> dfa_;
  std::shared_ptr<const VocabTrie> vocab_;
  size_t cache_states_;
  std::list<std::pair<int32_t, TokenMask>> lru_;  // most recent first
  std::unordered_map<int32_t, std::list<std::pair<int32_t, TokenMask>>::iterator> cached_;
  int64_t num_computed_ = 0;
};

}  // namespace strata::grammar

#pragma once
// OutputConstraint: one constrained sequence's place in its grammar (a StructuredOutput compiled
// by grammar::GrammarCompiler) -- the DFA state its output has reached, and the tokens the
// sampler may pick from there (docs/grammar.md, "In the engine").
//
// Copyable (n > 1 siblings fork it with the sequence); the DFA, the vocabulary trie and the mask
// cache are shared. Not thread-safe: one sequence, the step thread.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/grammar_compiler.h"
#include "grammar/token_masker.h"

namespace strata::engine {

class OutputConstraint {
 public:
  // end_tokens: what ends the sequence where the output is complete (its stop ids and the
  // model's EOS ids); vocab_size: the model's, which may differ from the tokenizer's.
  OutputConstraint(const std::shared_ptr<const grammar::CompiledGrammar>& grammar,
                   std::shared_ptr<const grammar::VocabTrie> vocab,
                   std::vector<int32_t> end_tokens, int32_t vocab_size);

  // What the next token may be. kSample: `allowed` holds the tokens as a bitset over the model's
  // vocabulary (bit id of word id / 64): those that keep the output a valid prefix, plus the end
  // tokens when the output is complete. kComplete: the output is complete and nothing may
  // follow it (the sequence ends without another token). kDeadEnd: no token of the vocabulary
  // continues it and it is not complete (a grammar the vocabulary cannot spell).
  enum class Next { kSample, kComplete, kDeadEnd };
  Next allowed(std::vector<uint64_t>& allowed);
  // The same into allowed's ceil(vocab_size / 64) words.
  Next allowed(std::span<uint64_t> allowed);

  // Whether token is an end token (allowed() offers them only where the output is complete).
  bool ends(int32_t token) const;
  // Moves past token, which allowed() offered and which is not an end token.
  void advance(int32_t token);
  bool complete() const { return masker_.dfa().accepting(state_); }
  int32_t state() const { return state_; }

 private:
  grammar::TokenMasker masker_;
  std::vector<int32_t> end_tokens_;
  int32_t vocab_size_;
  int32_t state_;
};

}  // namespace strata::engine

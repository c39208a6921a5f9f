#pragma once
// GrammarCompiler: a request's StructuredOutput (strata/structured_output.h) compiled into the
// byte DFA and shared mask cache its sequences sample under, once per distinct constraint
// (docs/grammar.md). Keeps the most recently used compiled grammars; every request with the same
// constraint shares one DFA and one MaskCache, so a state's token mask is walked once for all of
// them. The vocabulary's trie is built on first use.
//
// Thread-safe: the server compiles a request's constraint on its handler thread (an invalid one
// is a 400 there, and the work stays off the step loop); the engine then finds it cached. Two
// threads compiling the same constraint at once both compile it, and one result is kept.

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "grammar/byte_dfa.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_masker.h"
#include "strata/structured_output.h"

namespace strata::grammar {

// What a constraint may cost to compile and keep: every bound is checked while compiling, so a
// schema or pattern that would blow up is refused (ResourceExhausted) before it does.
struct GrammarLimits {
  JsonSchemaOptions json;  // the schema's regex length, whitespace, untyped nesting
  RegexLimits regex;       // repetition counts, the NFA's size
  EbnfLimits ebnf;         // a grammar's text, rules and its most nesting depth (max_depth)
  int32_t max_dfa_states = 1 << 16;
  size_t max_grammars = 64;         // compiled grammars kept
  size_t max_masks_per_grammar = 512;  // each grammar's MaskCache
};

struct CompiledGrammar {
  std::shared_ptr<const ByteDfa> dfa;
  std::shared_ptr<MaskCache> masks;  // thread-safe; shared by every sequence of this grammar
  // The DFA's liveness classes at the vocabulary's longest token (ByteDfa::liveness_classes):
  // the cache's keys, one mask per class. Empty (one mask per state) past the work bound.
  std::shared_ptr<const std::vector<int32_t>> mask_keys;
  // A grammar's recursion depth (compile_ebnf_dfa: the deepest up to GrammarLimits::ebnf's
  // max_depth that fits the bounds); -1 for the other kinds.
  int32_t grammar_depth = -1;
};

// The regex of the dialect (regex.h) whose matches are exactly the constraint's texts.
// InvalidArgument for an invalid schema or for a grammar (which is built into its NFA directly,
// ebnf_nfa.h, having no regex form), ResourceExhausted past limits.json's bounds.
Result<std::string> structured_output_regex(const StructuredOutput& constraint,
                                            const JsonSchemaOptions& json);

class GrammarCompiler {
 public:
  // vocab_bytes: every token's bytes (Tokenizer::token_bytes), called once, on first use.
  GrammarCompiler(std::function<std::vector<std::string>()> vocab_bytes, GrammarLimits limits);

  // The constraint's grammar, compiled or cached. InvalidArgument (a schema or pattern that is
  // not valid or not supported, with the reason) or ResourceExhausted (past the limits).
  Result<std::shared_ptr<const CompiledGrammar>> compile(const StructuredOutput& constraint);
  // The vocabulary's trie (built now if it was not).
  std::shared_ptr<const VocabTrie> vocab();

  const GrammarLimits& limits() const { return limits_; }
  size_t num_cached() const;
  int64_t num_compiled() const;  // compilations run (cache misses that compiled)

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>>;

  std::function<std::vector<std::string>()> vocab_bytes_;
  GrammarLimits limits_;
  std::once_flag vocab_once_;
  std::shared_ptr<const VocabTrie> vocab_;
  mutable std::mutex mu_;
  Lru lru_;  // most recent first
  std::unordered_map<std::string, Lru::iterator> index_;
  int64_t num_compiled_ = 0;
};

}  // namespace strata::grammar

#include "grammar/grammar_compiler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "core/json_input.h"
#include "grammar/ebnf_nfa.h"
#include "grammar/json_text_regex.h"

namespace strata::grammar {
namespace {

// The cache key: the kind, then every string that defines the language, each after its
// length, so that no two constraints share one.
std::string cache_key(const StructuredOutput& c) {
  std::string key = structured_output_kind_name(c.kind);
  const auto add = [&key](const std::string& s) {
    key += ' ' + std::to_string(s.size()) + ':';
    key += s;
  };
  add(c.spec);
  for (const std::string& choice : c.choices) add(choice);
  key += c.repeated ? " repeated" : " once";
  add(c.prefix);
  add(c.suffix);
  add(c.separator);
  return key;
}

}  // namespace

namespace {

// The language's own regex, before its markers.
Result<std::string> language_regex(const StructuredOutput& c, const JsonSchemaOptions& json) {
  using Kind = StructuredOutput::Kind;
  switch (c.kind) {
    case Kind::kNone:
      return Status::InvalidArgument("structured output: no constraint to compile");
    case Kind::kJsonSchema: {
      // ordered_json keeps the schema's property order, which the output follows.
      auto schema = parse_ordered_json_input(c.spec, kMaxFileJsonDepth);
      if (const auto* e = std::get_if<JsonInputError>(&schema)) {
        return Status::InvalidArgument("the JSON schema is not valid JSON: " + e->message);
      }
      return json_schema_regex(std::get<nlohmann::ordered_json>(schema), json);
    }
    case Kind::kJsonObject:
      return json_object_regex(json);
    case Kind::kRegex:
      return c.spec;
    case Kind::kGrammar:
      return Status::InvalidArgument("structured output: a grammar has no regex form");
    case Kind::kChoice: {
      std::string regex = "(?:";
      for (size_t i = 0; i < c.choices.size(); ++i) {
        if (i > 0) regex += '|';
        regex += json_regex::literal(c.choices[i]);
      }
      regex += ')';
      if (static_cast<int64_t>(regex.size()) > json.max_regex_bytes) {
        return Status::ResourceExhausted("the choices are longer than the grammar limit of " +
                                         std::to_string(json.max_regex_bytes) + " bytes");
      }
      return regex;
    }
  }
  return Status::InvalidArgument("structured output: unknown kind");
}

}  // namespace

Result<std::string> structured_output_regex(const StructuredOutput& c,
                                            const JsonSchemaOptions& json) {
  Result<std::string> inner = language_regex(c, json);
  if (!inner.ok() || (c.prefix.empty() && c.suffix.empty() && !c.repeated)) return inner;
  const std::string one =
      json_regex::literal(c.prefix) + "(?:" + *inner + ")" + json_regex::literal(c.suffix);
  std::string regex = one;
  if (c.repeated) regex = "(?:" + one + ")(?:" + json_regex::literal(c.separator) + one + ")*";
  if (static_cast<int64_t>(regex.size()) > json.max_regex_bytes) {
    return Status::ResourceExhausted("the constraint is longer than the grammar limit of " +
                                     std::to_string(json.max_regex_bytes) + " bytes");
  }
  return regex;
}

namespace {

// The constraint's byte DFA: a grammar's built directly at the deepest depth that fits
// (compile_ebnf_dfa), the other kinds' through their regex. *depth: the grammar's depth.
Result<ByteDfa> constraint_dfa(const StructuredOutput& c, const GrammarLimits& limits,
                               int32_t* depth) {
  if (c.kind == StructuredOutput::Kind::kGrammar) {
    EbnfLimits ebnf = limits.ebnf;
    ebnf.max_grammar_bytes = std::min(ebnf.max_grammar_bytes, limits.json.max_regex_bytes);
    ebnf.max_repeat = std::min(ebnf.max_repeat, limits.regex.max_repeat);
    Result<EbnfDfa> built =
        compile_ebnf_dfa(c.spec, {c.prefix, c.suffix, c.separator, c.repeated}, ebnf,
                         limits.regex.max_nfa_states, limits.max_dfa_states);
    if (!built.ok()) {
      if (built.status().code() != StatusCode::kResourceExhausted) return built.status();
      return Status::ResourceExhausted(built.status().message() +
                                       " (even with recursion cut at depth 0)");
    }
    *depth = built->depth;
    return std::move(built->dfa);
  }
  Result<std::string> regex = structured_output_regex(c, limits.json);
  if (!regex.ok()) return regex.status();
  Result<Nfa> nfa = compile_regex(*regex, limits.regex);
  if (!nfa.ok()) return nfa.status();
  return ByteDfa::build(*nfa, limits.max_dfa_states);
}

}  // namespace

GrammarCompiler::GrammarCompiler(std::function<std::vector<std::string>()> vocab_bytes,
                                 GrammarLimits limits)
    : vocab_bytes_(std::move(vocab_bytes)), limits_(limits) {
  if (limits_.max_grammars == 0) limits_.max_grammars = 1;
}

std::shared_ptr<const VocabTrie> GrammarCompiler::vocab() {
  std::call_once(vocab_once_, [&] { vocab_ = std::make_shared<const VocabTrie>(vocab_bytes_()); });
  return vocab_;
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile(
    const StructuredOutput& constraint) {
  std::string key = cache_key(constraint);
  {
    std::lock_guard lock(mu_);
    if (const auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  int32_t depth = -1;
  Result<ByteDfa> dfa = constraint_dfa(constraint, limits_, &depth);
  if (!dfa.ok()) return dfa.status();
  auto grammar = std::make_shared<CompiledGrammar>();
  grammar->dfa = std::make_shared<const ByteDfa>(std::move(dfa).value());
  grammar->masks = std::make_shared<MaskCache>(limits_.max_masks_per_grammar);
  grammar->grammar_depth = depth;
  // The trie is built once, outside the cache's lock; its longest token bounds the classes.
  grammar->mask_keys = std::make_shared<const std::vector<int32_t>>(
      grammar->dfa->liveness_classes(vocab()->max_token_bytes()));

  std::lock_guard lock(mu_);
  ++num_compiled_;
  if (const auto it = index_.find(key); it != index_.end()) {  // another thread was first
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  lru_.emplace_front(key, grammar);
  index_.emplace(std::move(key), lru_.begin());
  while (lru_.size() > limits_.max_grammars) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(grammar));
}

size_t GrammarCompiler::num_cached() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

int64_t GrammarCompiler::num_compiled() const {
  std::lock_guard lock(mu_);
  return num_compiled_;
}

}  // namespace strata::grammar

#pragma once
// StructuredOutput: a request's constraint on what it may generate (part of the public API:
// SamplingParams::structured). The output must be a text of the constraint's language: JSON
// valid against a schema (OpenAI's response_format json_schema, vLLM's guided_json), any JSON
// object (json_object), a regex's match (guided_regex), one of a list of strings (guided_choice)
// or a text of an EBNF grammar in GBNF (guided_grammar, recursion to a bounded depth); optionally each text wrapped in literal markers and repeated (a tool-call
// format's calls: `<tool_call>` + JSON + `</tool_call>`, several in a row). The engine compiles it
// once per distinct constraint into an automaton over the tokenizer's vocabulary and masks every
// sampling step with it (docs/grammar.md); a sequence may end (EOS or a stop token) only where its
// output is complete. Plain data.

#include <string>
#include <vector>

namespace strata {

struct StructuredOutput {
  enum class Kind {
    kNone,        // unconstrained
    kJsonSchema,  // spec: a JSON Schema as JSON text; the output follows its property order
    kJsonObject,  // any JSON object
    kRegex,       // spec: a pattern of the grammar layer's dialect, matching the whole output
    kChoice,      // exactly one of `choices`
    kGrammar,     // spec: an EBNF grammar (GBNF, start rule `root`); docs/grammar.md
  };
  // Every field is initialized, so that aggregate initializations may name a few.
  Kind kind = Kind::kNone;
  std::string spec = {};
  std::vector<std::string> choices = {};
  // Each text of the language is written as prefix + text + suffix; with `repeated`, one or more
  // of those, joined by `separator`. Empty and false: the language's texts as they are.
  std::string prefix = {};
  std::string suffix = {};
  std::string separator = {};
  bool repeated = false;

  bool active() const { return kind != Kind::kNone; }
  bool operator==(const StructuredOutput&) const = default;
};

// "json_schema", "json_object", "regex", "choice", "grammar" ("none" for kNone).
const char* structured_output_kind_name(StructuredOutput::Kind kind);

}  // namespace strata

#pragma once
// StructuredOutput: a request's constraint on what it may generate (part of the public API:
// SamplingParams::structured). The output must be a text of the constraint's language: JSON
// valid against a schema (OpenAI's response_format json_schema, vLLM's guided_json), any JSON
// object (json_object), a regex's match (guided_regex) or one of a list of strings
// (guided_choice). The engine compiles it once per distinct constraint into an automaton over the
// tokenizer's vocabulary and masks every sampling step with it (docs/grammar.md); a sequence may
// end (EOS or a stop token) only where its output is complete. Plain data.

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
  };
  Kind kind = Kind::kNone;
  std::string spec;
  std::vector<std::string> choices;

  bool active() const { return kind != Kind::kNone; }
  bool operator==(const StructuredOutput&) const = default;
};

// "json_schema", "json_object", "regex", "choice" ("none" for kNone).
const char* structured_output_kind_name(StructuredOutput::Kind kind);

}  // namespace strata

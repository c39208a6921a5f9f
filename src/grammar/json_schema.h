#pragma once
// JsonSchema: a JSON Schema (or "any JSON object") as a regex of the grammar layer's dialect
// (regex.h) that matches exactly the JSON texts valid against it, written the way a model is
// asked to write them (docs/grammar.md).

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace strata::grammar {

struct JsonSchemaOptions {
  // Whitespace the output may put between tokens: none (compact JSON), or up to this many
  // characters of [ \n\t] wherever JSON allows whitespace.
  int32_t max_whitespace = 0;
  // How deeply a value of no declared type (an object's unconstrained property, `{}`, or
  // "type": "object" without properties) may nest arrays and objects.
  int32_t max_untyped_depth = 2;
  // The regex's length bound: a schema whose regex would be longer is refused.
  int64_t max_regex_bytes = int64_t{1} << 20;
};

// Properties are written in the order the schema holds them: parse it as an ordered_json to keep
// its declaration order (OpenAI's structured outputs follow it); a nlohmann::json has its keys
// sorted. The keywords supported and the simplifications made are listed at the top of
// json_schema.cc. InvalidArgument naming the schema path for what is not supported or not valid;
// ResourceExhausted when the regex passes max_regex_bytes.
Result<std::string> json_schema_regex(const nlohmann::ordered_json& schema,
                                      const JsonSchemaOptions& options = {});
Result<std::string> json_schema_regex(const nlohmann::json& schema,
                                      const JsonSchemaOptions& options = {});

// Any JSON object (OpenAI's response_format {"type": "json_object"}), nesting bounded by
// max_untyped_depth; ResourceExhausted when that makes it pass max_regex_bytes.
Result<std::string> json_object_regex(const JsonSchemaOptions& options = {});

}  // namespace strata::grammar

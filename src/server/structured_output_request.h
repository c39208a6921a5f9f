#pragma once
// The structured-output fields of POST /v1/completions and /v1/chat/completions, read into
// SamplingParams::structured (docs/server.md, "Structured outputs"): OpenAI's response_format
// (text, json_object, json_schema), vLLM's guided_json / guided_regex / guided_choice /
// guided_grammar (with guided_decoding_backend, which names a backend and is accepted: there is
// one) and vLLM's structured_outputs object {json, regex, choice, grammar, json_object}. A
// request sets at most one constraint. What is not implemented (whitespace patterns, structural
// tags) is a 400 naming it. Whether the schema or pattern itself compiles is the engine's verdict
// (Engine::compile_structured_output), given before the request is submitted.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "strata/structured_output.h"

namespace strata::server {

// The request's fields that this reads (the endpoint's field list takes them).
inline constexpr std::string_view kStructuredOutputFields[] = {
    "response_format",   "guided_json",    "guided_regex",
    "guided_choice",     "guided_grammar", "guided_decoding_backend",
    "structured_outputs"};

struct StructuredOutputRequest {
  StructuredOutput constraint;  // kind kNone when the request sets none
  std::string field;            // the field that set it, for the compiler's errors
};

// body: the parsed request; raw: its text, parsed again in key order when a schema is an object
// (the output follows the schema's property order, which nlohmann::json does not keep).
std::optional<ApiError> read_structured_output(const nlohmann::json& body, std::string_view raw,
                                               StructuredOutputRequest& out);

}  // namespace strata::server

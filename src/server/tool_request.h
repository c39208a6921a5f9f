#pragma once
// The tool-calling fields of POST /v1/chat/completions (docs/server.md, "Tool calling"): `tools`
// (functions, each with a JSON Schema of its parameters), `tool_choice` ("none", "auto",
// "required" or a named function) and `parallel_tool_calls`. The tools go to the chat template
// (as transformers passes them); the output's tool calls are parsed in the served model's
// format (tool_call_parser.h). With "required" or a named function the output is constrained to
// calls in that format whose arguments follow the function's schema, so they always parse.

#include <nlohmann/json.hpp>

#include <optional>
#include <string_view>

#include "server/api_error.h"
#include "server/tool_call_parser.h"
#include "strata/structured_output.h"

namespace strata::server {

// The request's fields that this reads (the chat endpoint's field list takes them).
inline constexpr std::string_view kToolFields[] = {"tools", "tool_choice", "parallel_tool_calls"};

struct ToolRequest {
  // The tools the chat template renders, in the request's key order; empty when the request has
  // none or its tool_choice is "none" (the model is then not told of them).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  // The format the output's tool calls are parsed in; nullopt: the output is plain content.
  std::optional<ToolCallFormat> parse;
  // "required" or a named function: calls in `parse`'s format; kind kNone otherwise.
  StructuredOutput constraint;
};

// body: the parsed request; raw: its text, parsed again in key order for the tools' schemas.
// format: the served model's tool-call format (serve --tool-call-parser, or the one its chat
// template shows); a request with tools and no format is refused, as is a tool_choice that
// names no tool of the request.
std::optional<ApiError> read_tools(const nlohmann::json& body, std::string_view raw,
                                   std::optional<ToolCallFormat> format, ToolRequest& out);

// The structured output a forced tool choice decodes under: one call of `tools` in the format
// (any of them, or only `name` when set), several in a row when `parallel`. InvalidArgument
// when a tool's parameters are not a JSON Schema object.
std::variant<StructuredOutput, ApiError> tool_call_constraint(const nlohmann::ordered_json& tools,
                                                              ToolCallFormat format,
                                                              std::string_view name, bool parallel);

}  // namespace strata::server

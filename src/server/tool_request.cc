#include "server/tool_request.h"

#include <set>
#include <string>
#include <variant>

#include "core/json_input.h"
#include "core/quote.h"
#include "server/request_json.h"

namespace strata::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ApiError tools_error(const std::string& message) { return ApiError::bad_request(message, "tools"); }

// OpenAI's rule for function names: 1-64 of a-z, A-Z, 0-9, '_' and '-'.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Each tool: {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}.
std::optional<ApiError> check_tools(const json& tools) {
  if (!tools.is_array()) return tools_error("'tools' must be a list of function tools");
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object() || t.value("type", json()) != "function") {
      return tools_error(at + " must be {\"type\": \"function\", \"function\": {...}}");
    }
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object()) return tools_error(at + ".function must be an object");
    const auto name = f->find("name");
    if (name == f->end() || !name->is_string() || !valid_function_name(name->get<std::string>())) {
      return tools_error(at + ".function.name must be 1-64 letters, digits, '_' or '-'");
    }
    const auto description = f->find("description");
    if (description != f->end() && !description->is_null() && !description->is_string()) {
      return tools_error(at + ".function.description must be a string");
    }
    const auto params = f->find("parameters");
    if (params != f->end() && !params->is_null() && !params->is_object()) {
      return tools_error(at + ".function.parameters must be a JSON Schema object");
    }
    if (!names.insert(name->get<std::string>()).second) {
      return tools_error("two tools are named " + quote(name->get<std::string>(), 64));
    }
  }
  return std::nullopt;
}

struct Choice {
  enum class Kind { kNone, kAuto, kRequired, kNamed } kind;
  std::string name;
};

std::variant<Choice, ApiError> read_choice(const json& body, bool has_tools) {
  const auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) {
    return Choice{has_tools ? Choice::Kind::kAuto : Choice::Kind::kNone, {}};
  }
  const json& v = *it;
  const auto error = [](const std::string& m) { return ApiError::bad_request(m, "tool_choice"); };
  if (v == "none") return Choice{Choice::Kind::kNone, {}};
  if (v == "auto") return Choice{has_tools ? Choice::Kind::kAuto : Choice::Kind::kNone, {}};
  if (v == "required") {
    if (!has_tools) return error("tool_choice 'required' needs 'tools'");
    return Choice{Choice::Kind::kRequired, {}};
  }
  const json* f = v.is_object() && v.contains("function") ? &v["function"] : nullptr;
  const json* name =
      f != nullptr && f->is_object() && f->contains("name") ? &(*f)["name"] : nullptr;
  if (!v.is_object() || v.value("type", json()) != "function" || name == nullptr ||
      !name->is_string()) {
    return error(
        R"('tool_choice' must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}})");
  }
  if (!has_tools) return error("a named tool_choice needs 'tools'");
  return Choice{Choice::Kind::kNamed, name->get<std::string>()};
}

// One call of `fn` as its format writes it: {"name": NAME, "arguments" | "parameters": ARGS}.
ordered_json call_schema(const ordered_json& fn, ToolCallFormat format) {
  ordered_json params = fn.contains("parameters") && fn["parameters"].is_object()
                            ? fn["parameters"]
                            : ordered_json{{"type", "object"},
                                           {"properties", ordered_json::object()},
                                           {"additionalProperties", false}};
  const char* args = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  ordered_json props = ordered_json::object();
  props["name"] = {{"const", fn["name"]}};
  props[args] = std::move(params);
  return {{"type", "object"},
          {"properties", std::move(props)},
          {"required", ordered_json::array({"name", args})},
          {"additionalProperties", false}};
}

}  // namespace

std::variant<StructuredOutput, ApiError> tool_call_constraint(const ordered_json& tools,
                                                              ToolCallFormat format,
                                                              std::string_view name,
                                                              bool parallel) {
  ordered_json any = ordered_json::array();
  for (const ordered_json& t : tools) {
    const ordered_json& fn = t["function"];
    if (name.empty() || fn["name"] == name) any.push_back(call_schema(fn, format));
  }
  if (any.empty()) {
    return ApiError::bad_request(
        "tool_choice names " + quote(std::string(name), 64) + ", which is not among 'tools'",
        "tool_choice");
  }
  StructuredOutput c;
  c.kind = StructuredOutput::Kind::kJsonSchema;
  c.spec = (any.size() == 1 ? any[0] : ordered_json{{"anyOf", std::move(any)}})
               .dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  switch (format) {
    case ToolCallFormat::kHermes:
      c.prefix = "<tool_call>\n";
      c.suffix = "\n</tool_call>";
      c.separator = "\n";
      break;
    case ToolCallFormat::kLlama3Json:
      c.separator = "; ";
      break;
  }
  c.repeated = parallel;
  if (!parallel) c.separator.clear();
  return c;
}

std::optional<ApiError> read_tools(const json& body, std::string_view raw,
                                   std::optional<ToolCallFormat> format, ToolRequest& out) {
  out = ToolRequest{};
  const auto tools_it = body.find("tools");
  const bool has_tools = tools_it != body.end() && !tools_it->is_null() &&
                         !(tools_it->is_array() && tools_it->empty());
  if (has_tools) {
    if (auto e = check_tools(*tools_it)) return e;
  }
  bool parallel = true;
  if (const auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) {
      return ApiError::bad_request("'parallel_tool_calls' must be a boolean",
                                   "parallel_tool_calls");
    }
    parallel = p->get<bool>();
  }
  std::variant<Choice, ApiError> choice = read_choice(body, has_tools);
  if (auto* e = std::get_if<ApiError>(&choice)) return std::move(*e);
  const Choice& c = std::get<Choice>(choice);
  if (c.kind == Choice::Kind::kNone) return std::nullopt;
  if (!format) {
    return tools_error(
        "tool calling needs the model's tool-call format: this model's chat template shows "
        "none; start the server with --tool-call-parser (hermes, llama3_json)");
  }
  // The tools again in the request's key order: the template shows them as sent, and the
  // calls' arguments follow each schema's property order.
  auto ordered = parse_ordered_json_input(raw, kMaxRequestJsonDepth);
  if (const auto* e = std::get_if<JsonInputError>(&ordered)) {
    return ApiError::bad_request("the request body is not valid JSON: " + e->message);
  }
  out.tools = std::get<ordered_json>(ordered)["tools"];
  out.parse = format;
  if (c.kind == Choice::Kind::kAuto) return std::nullopt;
  std::variant<StructuredOutput, ApiError> constraint =
      tool_call_constraint(out.tools, *format, c.kind == Choice::Kind::kNamed ? c.name : "",
                           parallel && c.kind == Choice::Kind::kRequired);
  if (auto* e = std::get_if<ApiError>(&constraint)) return std::move(*e);
  out.constraint = std::move(std::get<StructuredOutput>(constraint));
  return std::nullopt;
}

}  // namespace strata::server

#include "server/structured_output_request.h"

#include <algorithm>
#include <variant>

#include "server/request_json.h"

namespace strata::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Kind = StructuredOutput::Kind;

// One constraint read from one field, and where its object schema sits in the body (the path
// to look up in the key-ordered parse).
struct Found {
  Kind kind = Kind::kNone;
  std::string spec;
  std::vector<std::string> choices;
  std::vector<std::string> schema_path;  // non-empty: spec is the object at this path

  static Found of(Kind kind, std::string spec = {}, std::vector<std::string> choices = {}) {
    Found f;
    f.kind = kind;
    f.spec = std::move(spec);
    f.choices = std::move(choices);
    return f;
  }
};

class Reader {
 public:
  Reader(const json& body, std::string_view raw) : body_(body), raw_(raw) {}

  std::optional<ApiError> read(StructuredOutputRequest& out);

 private:
  std::optional<ApiError> response_format(const json& v);
  std::optional<ApiError> structured_outputs(const json& v);
  // A schema given as an object (kept for the ordered parse) or as JSON text.
  std::optional<ApiError> schema(const json& v, std::vector<std::string> path,
                                 const std::string& field);
  // A regex or a grammar: non-empty text.
  std::optional<ApiError> text(const json& v, Kind kind, const std::string& field);
  std::optional<ApiError> choice(const json& v, const std::string& field);
  std::optional<ApiError> set(Found found, const std::string& field);
  std::optional<ApiError> ordered_schema(std::string& spec);

  const json& body_;
  std::string_view raw_;
  Found found_;
  std::string field_;
};

std::optional<ApiError> Reader::set(Found found, const std::string& field) {
  if (found_.kind != Kind::kNone) {
    return ApiError::bad_request("'" + field + "' and '" + field_ +
                                     "' both constrain the output; send one",
                                 field);
  }
  found_ = std::move(found);
  field_ = field;
  return std::nullopt;
}

std::optional<ApiError> Reader::schema(const json& v, std::vector<std::string> path,
                                       const std::string& field) {
  Found f = Found::of(Kind::kJsonSchema);
  if (v.is_string()) {
    f.spec = v.get<std::string>();
  } else if (v.is_object() || v.is_boolean()) {
    f.schema_path = std::move(path);
  } else {
    return ApiError::bad_request("'" + field + "' must be a JSON schema (an object, or its text)",
                                 field);
  }
  return set(std::move(f), field);
}

std::optional<ApiError> Reader::text(const json& v, Kind kind, const std::string& field) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
    return ApiError::bad_request("'" + field + "' must be a non-empty string", field);
  }
  return set(Found::of(kind, v.get<std::string>()), field);
}

std::optional<ApiError> Reader::choice(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty() ||
      !std::all_of(v.begin(), v.end(), [](const json& c) { return c.is_string(); })) {
    return ApiError::bad_request("'" + field + "' must be a non-empty list of strings", field);
  }
  return set(Found::of(Kind::kChoice, {}, v.get<std::vector<std::string>>()), field);
}

std::optional<ApiError> Reader::response_format(const json& v) {
  const auto type = v.is_object() ? v.find("type") : v.end();
  if (!v.is_object() || type == v.end() || !type->is_string()) {
    return ApiError::bad_request(
        "'response_format' must be an object with a 'type' of text, json_object or json_schema",
        "response_format");
  }
  const auto& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return set(Found::of(Kind::kJsonObject), "response_format");
  if (t != "json_schema") {
    return ApiError::bad_request("response_format type '" + t.substr(0, 64) +
                                     "' is not supported (text, json_object or json_schema)",
                                 "response_format");
  }
  const auto js = v.find("json_schema");
  const auto schema_it = js != v.end() && js->is_object() ? js->find("schema") : v.end();
  if (js == v.end() || !js->is_object() || schema_it == js->end() || schema_it->is_null()) {
    return ApiError::bad_request(
        R"(response_format json_schema needs 'json_schema': {"name": ..., "schema": {...}})",
        "response_format");
  }
  if (!schema_it->is_object() && !schema_it->is_boolean()) {
    return ApiError::bad_request("'response_format.json_schema.schema' must be a JSON schema object",
                                 "response_format");
  }
  return schema(*schema_it, {"response_format", "json_schema", "schema"}, "response_format");
}

// vLLM's structured_outputs: {json | regex | choice | grammar | json_object: true}, and the options
// that change nothing here (the fallback and whitespace switches of its other backends).
std::optional<ApiError> Reader::structured_outputs(const json& v) {
  const std::string field = "structured_outputs";
  if (!v.is_object()) return ApiError::bad_request("'structured_outputs' must be an object", field);
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    if (key == "json") {
      if (auto e = schema(value, {field, "json"}, field)) return e;
    } else if (key == "regex") {
      if (auto e = text(value, Kind::kRegex, field)) return e;
    } else if (key == "grammar") {
      if (auto e = text(value, Kind::kGrammar, field)) return e;
    } else if (key == "choice") {
      if (auto e = choice(value, field)) return e;
    } else if (key == "json_object") {
      if (!value.is_boolean()) return ApiError::bad_request("'json_object' must be a boolean", field);
      if (value.get<bool>()) {
        if (auto e = set(Found::of(Kind::kJsonObject), field)) return e;
      }
    } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties") {
      if (!value.is_boolean()) {
        return ApiError::bad_request("'structured_outputs." + key + "' must be a boolean", field);
      }
    } else {
      return ApiError::bad_request("structured_outputs." + key.substr(0, 64) +
                                       " is not supported by this server (json, regex, choice, "
                                       "grammar and json_object are)",
                                   field);
    }
  }
  return std::nullopt;
}

std::optional<ApiError> Reader::ordered_schema(std::string& spec) {
  // The body passed parse_request_json's checks, so this parse succeeds the same way.
  auto parsed = parse_ordered_json_input(raw_, kMaxRequestJsonDepth);
  if (auto* e = std::get_if<JsonInputError>(&parsed)) return ApiError::bad_request(e->message);
  const ordered_json* at = &std::get<ordered_json>(parsed);
  for (const std::string& key : found_.schema_path) at = &at->at(key);
  spec = at->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  return std::nullopt;
}

std::optional<ApiError> Reader::read(StructuredOutputRequest& out) {
  const auto get = [&](const char* name) -> const json* {
    const auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = get("response_format")) {
    if (auto e = response_format(*v)) return e;
  }
  if (const json* v = get("guided_json")) {
    if (auto e = schema(*v, {"guided_json"}, "guided_json")) return e;
  }
  if (const json* v = get("guided_regex")) {
    if (auto e = text(*v, Kind::kRegex, "guided_regex")) return e;
  }
  if (const json* v = get("guided_choice")) {
    if (auto e = choice(*v, "guided_choice")) return e;
  }
  if (const json* v = get("guided_grammar")) {
    if (auto e = text(*v, Kind::kGrammar, "guided_grammar")) return e;
  }
  if (const json* v = get("guided_decoding_backend"); v != nullptr && !v->is_string()) {
    return ApiError::bad_request("'guided_decoding_backend' must be a string",
                                 "guided_decoding_backend");
  }
  if (const json* v = get("structured_outputs")) {
    if (auto e = structured_outputs(*v)) return e;
  }
  if (!found_.schema_path.empty()) {
    if (auto e = ordered_schema(found_.spec)) return e;
  }
  out.constraint = StructuredOutput{found_.kind, std::move(found_.spec), std::move(found_.choices)};
  out.field = std::move(field_);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_structured_output(const json& body, std::string_view raw,
                                               StructuredOutputRequest& out) {
  return Reader(body, raw).read(out);
}

}  // namespace strata::server

// JSON Schema to regex: a walk over the schema that builds each value's regex from its
// subschemas' (json_text_regex.h and json_pattern_regex.h supply the leaves).
//
// What is supported, and the deliberate simplifications (each keeps the regex a subset of the
// valid texts unless it says otherwise):
//   - type (a name or an array of names); with no type, the types its keywords imply (properties
//     -> object, items -> array, minLength -> string, minimum -> number), or any value when none.
//   - object: properties in the schema's order (an ordered_json keeps the declaration order; a
//     nlohmann::json has sorted them), required, additionalProperties. Extra properties
//     appear only in an object that declares no properties: where properties are declared, only
//     those are written, whatever additionalProperties says. minProperties / maxProperties only
//     on an object with no declared properties.
//   - array: items (a schema, or an array as prefixItems with additionalItems), prefixItems,
//     minItems, maxItems; uniqueItems false.
//   - string: minLength / maxLength (in characters: a code point or one escape each), pattern,
//     format (json_text_regex.h's list), not combined with one another.
//   - integer and number: unbounded ones have at most 18 integer digits and a two-digit exponent
//     (so a reader holds every value: an int64, a finite double); minimum, maximum,
//     exclusiveMinimum, exclusiveMaximum (draft 4's boolean form too), exactly; an integer's
//     fractional bound is rounded inward, a number's must be an integer. A bounded number is
//     written without exponent.
//   - enum and const: each value written compactly (with whitespace where allowed), as
//     nlohmann::json dumps it; numbers and strings only in that spelling.
//   - anyOf, and oneOf read as anyOf (a value matching two branches is accepted: a superset);
//     allOf of one subschema; $ref to a JSON pointer in the document ("#/$defs/x"), refused when
//     recursive; nullable (OpenAPI) as "or null".
//   - refused with InvalidArgument: keywords that change validity and are not listed above (not,
//     if/then/else, patternProperties, dependentRequired, uniqueItems true, multipleOf, ...) and
//     combinators or $ref beside other validating keywords. Unknown keywords are ignored, as JSON
//     Schema says for annotations.

#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_pattern_regex.h"
#include "grammar/json_text_regex.h"

namespace strata::grammar {
namespace {

using nlohmann::ordered_json;
namespace jr = json_regex;

constexpr int kMaxSchemaDepth = 256;  // a bound on the walk's recursion, for hostile inputs

// Keywords whose meaning we do not build: a schema holding one is refused.
const std::set<std::string>& refused_keywords() {
  static const std::set<std::string> k = {"not",
                                          "if",
                                          "then",
                                          "else",
                                          "patternProperties",
                                          "dependentRequired",
                                          "dependentSchemas",
                                          "dependencies",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "propertyNames",
                                          "unevaluatedItems",
                                          "multipleOf",
                                          "$dynamicRef",
                                          "$recursiveRef"};
  return k;
}

// Keywords that constrain the value; $ref and the combinators stand alone among them.
const std::set<std::string>& validating_keywords() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "minProperties",
                                          "maxProperties",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "nullable"};
  return k;
}

const std::vector<std::pair<std::string, std::vector<std::string>>>& implied_types() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> k = {
      {"object",
       {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}},
      {"array", {"items", "prefixItems", "additionalItems", "minItems", "maxItems"}},
      {"string", {"minLength", "maxLength", "pattern", "format"}},
      {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}}};
  return k;
}

std::string child_path(const std::string& path, const std::string& token) {
  std::string escaped;
  for (const char c : token) {
    if (c == '~') {
      escaped += "~0";
    } else if (c == '/') {
      escaped += "~1";
    } else {
      escaped += c;
    }
  }
  return path + "/" + escaped;
}

Status invalid(const std::string& path, const std::string& what) {
  return Status::InvalidArgument((path.empty() ? "/" : path) + ": " + what);
}

bool is_type(const ordered_json& value, const std::string& type) {
  if (type == "integer") {
    return value.is_number_integer() ||
           (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
  }
  if (type == "number") return value.is_number();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "array") return value.is_array();
  return value.is_object();
}

// The walk, holding the document (for $ref) and the $refs being expanded (to refuse a cycle).
class SchemaCompiler {
 public:
  SchemaCompiler(const ordered_json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options) {
    if (options.max_whitespace > 0) {
      ws_ = jr::repeat("[ \\n\\t]", 0, options.max_whitespace);
    }
  }

  Result<std::string> compile(const ordered_json& schema, const std::string& path);

  // Any JSON value whose arrays and objects nest at most `depth` levels.
  const std::string& any_value(int depth);
  // An object whose member values match `value` (minProperties..maxProperties of them).
  std::string free_object(const std::string& value, int64_t min_count, int64_t max_count);
  const std::string& ws() const { return ws_; }

 private:
  Result<std::string> compile_checked(const ordered_json& schema, const std::string& path);
  Result<std::string> compile_ref(const ordered_json& schema, const std::string& path);
  Result<std::string> compile_alternatives(const ordered_json& schema, const std::string& key,
                                           const std::string& path);
  Result<std::string> compile_enum(const ordered_json& schema, const std::string& path);
  Result<std::vector<std::string>> types_of(const ordered_json& schema, const std::string& path);
  Result<std::string> compile_type(const ordered_json& schema, const std::string& type,
                                   const std::string& path);
  Result<std::string> compile_object(const ordered_json& schema, const std::string& path);
  Result<std::string> compile_array(const ordered_json& schema, const std::string& path);
  Result<std::string> compile_string(const ordered_json& schema, const std::string& path);
  Result<std::string> compile_number(const ordered_json& schema, bool integer,
                                     const std::string& path);
  std::string value_literal(const ordered_json& value);
  // The regex of a subschema that may be absent (an unconstrained value then) or false.
  Result<std::optional<std::string>> optional_subschema(const ordered_json& schema,
                                                        const std::string& key,
                                                        const std::string& path);

  const ordered_json& root_;
  JsonSchemaOptions options_;
  std::string ws_;
  std::vector<std::string> ref_stack_;
  std::vector<std::string> any_values_;  // any_value(d) at [d]
  int depth_ = 0;
};

Result<std::string> SchemaCompiler::compile(const ordered_json& schema, const std::string& path) {
  if (++depth_ > kMaxSchemaDepth) {
    --depth_;
    return invalid(path, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth));
  }
  Result<std::string> regex = compile_checked(schema, path);
  --depth_;
  if (regex.ok() && static_cast<int64_t>(regex->size()) > options_.max_regex_bytes) {
    return Status::ResourceExhausted((path.empty() ? "/" : path) + ": the regex passes " +
                                     std::to_string(options_.max_regex_bytes) + " bytes");
  }
  return regex;
}

Result<std::string> SchemaCompiler::compile_checked(const ordered_json& schema,
                                                    const std::string& path) {
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return any_value(options_.max_untyped_depth);
    return invalid(path, "the schema false accepts no value");
  }
  if (!schema.is_object()) return invalid(path, "a schema must be an object or a boolean");
  for (const auto& [key, value] : schema.items()) {
    const bool refused = refused_keywords().count(key) > 0 ||
                         (key == "uniqueItems" && value != false) ||
                         (key == "unevaluatedProperties" && value != true);
    if (refused) return invalid(path, "keyword '" + key + "' is not supported");
  }
  static const std::string kStandAlone[] = {"$ref", "anyOf", "oneOf", "allOf"};
  for (const std::string& key : kStandAlone) {
    if (!schema.contains(key)) continue;
    for (const auto& [other, value] : schema.items()) {
      if (other != key && validating_keywords().count(other) > 0) {
        return invalid(path, std::string("'")
                                 .append(key)
                                 .append("' beside '")
                                 .append(other)
                                 .append("' is not supported"));
      }
    }
    if (key == "$ref") return compile_ref(schema, path);
    return compile_alternatives(schema, key, path);
  }
  if (schema.contains("enum") || schema.contains("const")) return compile_enum(schema, path);
  Result<std::vector<std::string>> types = types_of(schema, path);
  if (!types.ok()) return types.status();
  if (types->empty()) return any_value(options_.max_untyped_depth);
  std::string alts;
  for (const std::string& type : *types) {
    Result<std::string> regex = compile_type(schema, type, path);
    if (!regex.ok()) return regex.status();
    alts += (alts.empty() ? "" : "|") + *regex;
  }
  if (const auto nullable = schema.find("nullable"); nullable != schema.end()) {
    if (!nullable->is_boolean()) return invalid(path, "'nullable' must be true or false");
    if (nullable->get<bool>()) alts += "|null";
  }
  return jr::group(alts);
}

Result<std::string> SchemaCompiler::compile_ref(const ordered_json& schema,
                                                const std::string& path) {
  const ordered_json& ref = schema["$ref"];
  if (!ref.is_string() || ref.get<std::string>().rfind('#', 0) != 0) {
    return invalid(path, "only a $ref within the document ('#/...') is supported");
  }
  const std::string target = ref.get<std::string>();
  if (std::find(ref_stack_.begin(), ref_stack_.end(), target) != ref_stack_.end()) {
    return invalid(path, "recursive $ref at " + (path.empty() ? "/" : path) + " is not supported");
  }
  const ordered_json* resolved = nullptr;
  try {
    const ordered_json::json_pointer pointer(target.substr(1));
    if (root_.contains(pointer)) resolved = &root_.at(pointer);
  } catch (const ordered_json::exception&) {
    resolved = nullptr;
  }
  if (resolved == nullptr) return invalid(path, "$ref '" + target + "' does not resolve");
  ref_stack_.push_back(target);
  Result<std::string> regex = compile(*resolved, target.substr(1));
  ref_stack_.pop_back();
  return regex;
}

Result<std::string> SchemaCompiler::compile_alternatives(const ordered_json& schema,
                                                         const std::string& key,
                                                         const std::string& path) {
  const ordered_json& subschemas = schema[key];
  if (!subschemas.is_array() || subschemas.empty()) {
    return invalid(path, "'" + key + "' must be a non-empty array");
  }
  if (key == "allOf" && subschemas.size() != 1) {
    return invalid(path, "allOf of more than one subschema is not supported");
  }
  std::string alts;
  for (size_t i = 0; i < subschemas.size(); ++i) {
    Result<std::string> regex =
        compile(subschemas[i], child_path(path, key) + "/" + std::to_string(i));
    if (!regex.ok()) return regex.status();
    alts += (alts.empty() ? "" : "|") + *regex;
  }
  return jr::group(alts);
}

Result<std::string> SchemaCompiler::compile_enum(const ordered_json& schema,
                                                 const std::string& path) {
  for (const auto& [key, value] : schema.items()) {
    if (key != "enum" && key != "const" && key != "type" && validating_keywords().count(key) > 0) {
      return invalid(path, "enum or const beside '" + key + "' is not supported");
    }
  }
  if (schema.contains("enum") && schema.contains("const")) {
    return invalid(path, "enum beside const is not supported");
  }
  const ordered_json values =
      schema.contains("const") ? ordered_json::array({schema["const"]}) : schema["enum"];
  if (!values.is_array()) return invalid(path, "enum must be an array");
  std::vector<std::string> types;
  if (schema.contains("type")) {
    Result<std::vector<std::string>> declared = types_of(schema, path);
    if (!declared.ok()) return declared.status();
    types = *declared;
  }
  std::string alts;
  for (const ordered_json& value : values) {
    const bool typed = types.empty() || std::any_of(types.begin(), types.end(), [&](const auto& t) {
                         return is_type(value, t);
                       });
    if (typed) alts += (alts.empty() ? "" : "|") + value_literal(value);
  }
  if (alts.empty()) return invalid(path, "no enum or const value has the declared type");
  return jr::group(alts);
}

Result<std::vector<std::string>> SchemaCompiler::types_of(const ordered_json& schema,
                                                          const std::string& path) {
  static const std::set<std::string> kTypes = {"object", "array",   "string", "integer",
                                               "number", "boolean", "null"};
  std::vector<std::string> types;
  if (!schema.contains("type")) {
    for (const auto& [type, keywords] : implied_types()) {
      if (std::any_of(keywords.begin(), keywords.end(),
                      [&](const std::string& k) { return schema.contains(k); })) {
        types.push_back(type);
      }
    }
    return types;
  }
  const ordered_json& type = schema["type"];
  const ordered_json names = type.is_array() ? type : ordered_json::array({type});
  for (const ordered_json& name : names) {
    if (!name.is_string() || kTypes.count(name.get<std::string>()) == 0) {
      return invalid(path,
                     "type must be one of object, array, string, integer, number, "
                     "boolean, null, or an array of them; got " +
                         name.dump());
    }
    types.push_back(name.get<std::string>());
  }
  if (types.empty()) return invalid(path, "type must not be an empty array");
  return types;
}

Result<std::string> SchemaCompiler::compile_type(const ordered_json& schema,
                                                 const std::string& type, const std::string& path) {
  if (type == "object") return compile_object(schema, path);
  if (type == "array") return compile_array(schema, path);
  if (type == "string") return compile_string(schema, path);
  if (type == "integer" || type == "number") return compile_number(schema, type == "integer", path);
  if (type == "boolean") return std::string("true|false");
  return std::string("null");
}

Result<std::optional<int64_t>> count_keyword(const ordered_json& schema, const std::string& key,
                                             const std::string& path) {
  if (!schema.contains(key)) return std::optional<int64_t>();
  const ordered_json& value = schema[key];
  if (!is_type(value, "integer") || value.get<double>() < 0) {
    return invalid(path, key + " must be a non-negative integer");
  }
  return std::optional<int64_t>(value.get<int64_t>());
}

std::string SchemaCompiler::value_literal(const ordered_json& value) {
  const auto dumped = [](const ordered_json& v) {
    return jr::literal(v.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
  };
  if (!value.is_structured()) return dumped(value);
  const std::string sep = ws_ + "," + ws_;
  std::string body;
  for (const auto& [key, member] : value.items()) {
    if (!body.empty()) body += sep;
    if (value.is_object()) body += dumped(ordered_json(key)) + ws_ + ":" + ws_;
    body += value_literal(member);
  }
  return value.is_object() ? "\\{" + ws_ + body + ws_ + "\\}" : "\\[" + ws_ + body + ws_ + "\\]";
}

const std::string& SchemaCompiler::any_value(int depth) {
  depth = std::max(depth, 0);
  while (static_cast<int>(any_values_.size()) <= depth) {
    // Each level holds the one below twice; past the bound, stop and let the caller's size
    // check refuse it rather than build an exponential string.
    if (!any_values_.empty() &&
        static_cast<int64_t>(any_values_.back().size()) > options_.max_regex_bytes) {
      return any_values_.back();
    }
    const std::string scalars =
        "\"" + jr::string_char() + "*\"|" + *jr::number({}, false) + "|true|false|null";
    if (any_values_.empty()) {
      any_values_.push_back(jr::group(scalars));
      continue;
    }
    const std::string inner = any_values_.back();
    std::string elements = inner;
    elements += jr::group(ws_ + "," + ws_ + inner);
    elements += "*" + ws_;
    std::string alts = scalars;
    alts += "|\\[" + ws_ + jr::group(elements) + "?\\]";
    alts += "|" + free_object(inner, 0, jr::kUnbounded);
    any_values_.push_back(jr::group(alts));
  }
  return any_values_[static_cast<size_t>(depth)];
}

std::string SchemaCompiler::free_object(const std::string& value, int64_t min_count,
                                        int64_t max_count) {
  if (max_count == 0) return "\\{" + ws_ + "\\}";
  const std::string member = "\"" + jr::string_char() + "*\"" + ws_ + ":" + ws_ + value;
  const std::string body =
      member + jr::repeat(jr::group(ws_ + "," + ws_ + member), std::max<int64_t>(min_count, 1) - 1,
                          max_count == jr::kUnbounded ? jr::kUnbounded : max_count - 1);
  if (min_count > 0) return "\\{" + ws_ + body + ws_ + "\\}";
  return "\\{" + ws_ + jr::group(body + ws_) + "?\\}";
}

Result<std::optional<std::string>> SchemaCompiler::optional_subschema(const ordered_json& schema,
                                                                      const std::string& key,
                                                                      const std::string& path) {
  if (!schema.contains(key) || schema[key] == true) {
    return std::optional<std::string>(any_value(options_.max_untyped_depth - 1));
  }
  if (schema[key] == false) return std::optional<std::string>();
  Result<std::string> regex = compile(schema[key], child_path(path, key));
  if (!regex.ok()) return regex.status();
  return std::optional<std::string>(*regex);
}

// Members in order, each present or (when optional) absent, comma-separated. After the first
// required member every other member carries its leading comma, and before it its trailing one,
// so the regex is linear in the members; with none required it is one alternative per first
// member present, quadratic.
std::string members_regex(const std::vector<std::pair<std::string, bool>>& members,
                          const std::string& sep) {
  const auto first_required =
      std::find_if(members.begin(), members.end(), [](const auto& m) { return m.second; });
  const auto with_leading_commas = [&](size_t from) {
    std::string out;
    for (size_t j = from; j < members.size(); ++j) {
      const std::string piece = sep + members[j].first;
      out += members[j].second ? piece : jr::group(piece) + "?";
    }
    return out;
  };
  if (first_required != members.end()) {
    const auto k = static_cast<size_t>(first_required - members.begin());
    std::string out;
    for (size_t j = 0; j < k; ++j) out += jr::group(members[j].first + sep) + "?";
    return out + members[k].first + with_leading_commas(k + 1);
  }
  std::string alts;
  for (size_t first = 0; first < members.size(); ++first) {
    alts += (alts.empty() ? "" : "|") + members[first].first + with_leading_commas(first + 1);
  }
  return jr::group(alts);
}

Result<std::string> SchemaCompiler::compile_object(const ordered_json& schema,
                                                   const std::string& path) {
  const ordered_json properties = schema.value("properties", ordered_json::object());
  const ordered_json required = schema.value("required", ordered_json::array());
  if (!properties.is_object()) return invalid(path, "properties must be an object");
  if (!required.is_array() ||
      !std::all_of(required.begin(), required.end(), [](const auto& r) { return r.is_string(); })) {
    return invalid(path, "required must be an array of strings");
  }
  Result<std::optional<std::string>> additional =
      optional_subschema(schema, "additionalProperties", path);
  if (!additional.ok()) return additional.status();
  if (properties.empty() && required.empty()) {
    Result<std::optional<int64_t>> min_count = count_keyword(schema, "minProperties", path);
    Result<std::optional<int64_t>> max_count = count_keyword(schema, "maxProperties", path);
    if (!min_count.ok()) return min_count.status();
    if (!max_count.ok()) return max_count.status();
    const int64_t lo = min_count->value_or(0);
    const int64_t hi = !additional->has_value() ? 0 : max_count->value_or(jr::kUnbounded);
    if (hi != jr::kUnbounded && lo > hi)
      return invalid(path, "minProperties exceeds maxProperties");
    return free_object(additional->value_or(""), lo, hi);
  }
  if (schema.contains("minProperties") || schema.contains("maxProperties")) {
    return invalid(path, "minProperties / maxProperties beside properties is not supported");
  }
  const auto is_required = [&](const std::string& name) {
    return std::find(required.begin(), required.end(), name) != required.end();
  };
  std::vector<std::pair<std::string, bool>> members;
  const std::string colon = ws_ + ":" + ws_;
  for (const auto& [name, subschema] : properties.items()) {
    Result<std::string> value =
        compile(subschema, child_path(child_path(path, "properties"), name));
    if (!value.ok()) return value.status();
    members.emplace_back(jr::literal(ordered_json(name).dump()) + colon + *value,
                         is_required(name));
  }
  for (const ordered_json& name : required) {
    if (properties.contains(name.get<std::string>())) continue;
    if (!additional->has_value()) {
      return invalid(path, "required property " + name.dump() +
                               " is not in properties and additionalProperties is false");
    }
    members.emplace_back(jr::literal(name.dump()) + colon + **additional, true);
  }
  const bool any_required =
      std::any_of(members.begin(), members.end(), [](const auto& m) { return m.second; });
  const std::string body = members_regex(members, ws_ + "," + ws_);
  if (any_required) return "\\{" + ws_ + body + ws_ + "\\}";
  return "\\{" + ws_ + jr::group(body + ws_) + "?\\}";
}

Result<std::string> SchemaCompiler::compile_array(const ordered_json& schema,
                                                  const std::string& path) {
  std::vector<std::string> prefix;
  const bool tuple_items = schema.contains("items") && schema["items"].is_array();
  const std::string prefix_key = tuple_items ? "items" : "prefixItems";
  if (schema.contains(prefix_key)) {
    if (!schema[prefix_key].is_array()) return invalid(path, prefix_key + " must be an array");
    for (size_t i = 0; i < schema[prefix_key].size(); ++i) {
      Result<std::string> element =
          compile(schema[prefix_key][i], child_path(path, prefix_key) + "/" + std::to_string(i));
      if (!element.ok()) return element.status();
      prefix.push_back(*element);
    }
  }
  Result<std::optional<std::string>> rest =
      optional_subschema(schema, tuple_items ? "additionalItems" : "items", path);
  Result<std::optional<int64_t>> min_count = count_keyword(schema, "minItems", path);
  Result<std::optional<int64_t>> max_count = count_keyword(schema, "maxItems", path);
  if (!rest.ok()) return rest.status();
  if (!min_count.ok()) return min_count.status();
  if (!max_count.ok()) return max_count.status();
  const auto k = static_cast<int64_t>(prefix.size());
  const int64_t lo = min_count->value_or(0);
  int64_t hi = max_count->value_or(jr::kUnbounded);
  if (hi != jr::kUnbounded && lo > hi) return invalid(path, "minItems exceeds maxItems");
  if (!rest->has_value()) hi = hi == jr::kUnbounded ? k : std::min(hi, k);
  if (hi != jr::kUnbounded && lo > hi) {
    return invalid(path, "minItems exceeds the number of items allowed");
  }
  if (hi == 0) return "\\[" + ws_ + "\\]";
  const std::string sep = ws_ + "," + ws_;
  std::string body;
  if (k == 0) {
    body = **rest + jr::repeat(jr::group(sep + **rest), std::max<int64_t>(lo, 1) - 1,
                               hi == jr::kUnbounded ? hi : hi - 1);
  } else {
    std::string inner;
    if (hi == jr::kUnbounded || hi > k) {
      inner = jr::repeat(jr::group(sep + **rest), std::max<int64_t>(lo - k, 0),
                         hi == jr::kUnbounded ? hi : hi - k);
    }
    for (int64_t j = std::min(k, hi == jr::kUnbounded ? k : hi) - 1; j >= 1; --j) {
      std::string piece = sep;
      piece += prefix[static_cast<size_t>(j)];
      piece += inner;
      inner = j + 1 <= lo ? piece : jr::group(piece) + "?";
    }
    body = prefix[0] + inner;
  }
  if (lo > 0) return "\\[" + ws_ + body + ws_ + "\\]";
  return "\\[" + ws_ + jr::group(body + ws_) + "?\\]";
}

Result<std::string> SchemaCompiler::compile_string(const ordered_json& schema,
                                                   const std::string& path) {
  Result<std::optional<int64_t>> min_length = count_keyword(schema, "minLength", path);
  Result<std::optional<int64_t>> max_length = count_keyword(schema, "maxLength", path);
  if (!min_length.ok()) return min_length.status();
  if (!max_length.ok()) return max_length.status();
  const bool lengths = min_length->has_value() || max_length->has_value();
  if (int{lengths} + int{schema.contains("pattern")} + int{schema.contains("format")} > 1) {
    return invalid(path, "pattern, format and minLength / maxLength together are not supported");
  }
  Result<std::string> content = std::string();
  if (schema.contains("pattern") || schema.contains("format")) {
    const std::string key = schema.contains("pattern") ? "pattern" : "format";
    if (!schema[key].is_string()) return invalid(path, key + " must be a string");
    content = key == "pattern" ? jr::pattern_content(schema[key].get<std::string>())
                               : jr::format_content(schema[key].get<std::string>());
    if (!content.ok()) return invalid(child_path(path, key), content.status().message());
  } else {
    const int64_t lo = min_length->value_or(0);
    const int64_t hi = max_length->value_or(jr::kUnbounded);
    if (hi != jr::kUnbounded && lo > hi) return invalid(path, "minLength exceeds maxLength");
    content = jr::repeat(jr::string_char(), lo, hi);
  }
  return "\"" + *content + "\"";
}

// The tighter of an inclusive and an exclusive bound (draft 4's boolean form included).
Result<std::optional<std::pair<double, bool>>> bound(const ordered_json& schema,
                                                     const std::string& inclusive_key,
                                                     const std::string& exclusive_key, bool lower,
                                                     const std::string& path) {
  std::optional<std::pair<double, bool>> best;
  for (const std::string& key : {inclusive_key, exclusive_key}) {
    if (!schema.contains(key) || schema[key].is_boolean()) continue;
    if (!schema[key].is_number()) return invalid(path, key + " must be a number");
    const double value = schema[key].get<double>();
    if (std::fabs(value) > static_cast<double>(jr::kMaxNumericBound)) {
      return invalid(path, key + " past 1e15 is not supported");
    }
    const bool exclusive = key == exclusive_key || schema.value(exclusive_key, false) == true;
    const bool tighter = !best || (lower ? value > best->first : value < best->first) ||
                         (value == best->first && exclusive);
    if (tighter) best = std::make_pair(value, exclusive);
  }
  return best;
}

Result<std::string> SchemaCompiler::compile_number(const ordered_json& schema, bool integer,
                                                   const std::string& path) {
  jr::NumberBounds bounds;
  for (const bool lower : {true, false}) {
    Result<std::optional<std::pair<double, bool>>> b =
        lower ? bound(schema, "minimum", "exclusiveMinimum", true, path)
              : bound(schema, "maximum", "exclusiveMaximum", false, path);
    if (!b.ok()) return b.status();
    if (!b->has_value()) continue;
    auto [value, exclusive] = **b;
    if (integer) {  // an integer's bounds become inclusive integers
      value = lower ? (exclusive ? std::floor(value) + 1 : std::ceil(value))
                    : (exclusive ? std::ceil(value) - 1 : std::floor(value));
      exclusive = false;
    } else if (std::floor(value) != value) {
      return invalid(path, "a fractional bound on a number is not supported");
    }
    (lower ? bounds.lower : bounds.upper) = static_cast<int64_t>(value);
    (lower ? bounds.lower_exclusive : bounds.upper_exclusive) = exclusive;
  }
  std::optional<std::string> regex = jr::number(bounds, integer);
  if (!regex) return invalid(path, "no number is within the bounds");
  return *regex;
}

}  // namespace

Result<std::string> json_schema_regex(const nlohmann::ordered_json& schema,
                                      const JsonSchemaOptions& options) {
  if (options.max_whitespace < 0 || options.max_untyped_depth < 0) {
    return Status::InvalidArgument("max_whitespace and max_untyped_depth must be >= 0");
  }
  SchemaCompiler compiler(schema, options);
  Result<std::string> value = compiler.compile(schema, "");
  if (!value.ok()) return value.status();
  std::string regex = compiler.ws() + *value + compiler.ws();
  if (static_cast<int64_t>(regex.size()) > options.max_regex_bytes) {
    return Status::ResourceExhausted("the regex passes " + std::to_string(options.max_regex_bytes) +
                                     " bytes");
  }
  return regex;
}

Result<std::string> json_schema_regex(const nlohmann::json& schema,
                                      const JsonSchemaOptions& options) {
  return json_schema_regex(
      ordered_json::parse(schema.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)),
      options);
}

Result<std::string> json_object_regex(const JsonSchemaOptions& options) {
  if (options.max_whitespace < 0 || options.max_untyped_depth < 0) {
    return Status::InvalidArgument("max_whitespace and max_untyped_depth must be >= 0");
  }
  const ordered_json empty;
  SchemaCompiler compiler(empty, options);
  const std::string values = compiler.any_value(options.max_untyped_depth - 1);
  std::string regex =
      compiler.ws() + compiler.free_object(values, 0, jr::kUnbounded) + compiler.ws();
  if (static_cast<int64_t>(regex.size()) > options.max_regex_bytes) {
    return Status::ResourceExhausted(
        "json_object_regex: max_untyped_depth " + std::to_string(options.max_untyped_depth) +
        " makes the regex pass " + std::to_string(options.max_regex_bytes) + " bytes");
  }
  return regex;
}

}  // namespace strata::grammar

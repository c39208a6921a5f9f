#pragma once
// Typed field access for tokenizer.json and tokenizer_config.json: every accessor throws
// strata::Error naming the file, the object and the field when the field is missing or has the
// wrong type, so a malformed file never surfaces as a nlohmann exception.

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"

namespace strata::tokenizer {

inline const nlohmann::json& json_field(const nlohmann::json& j, const char* key,
                                        const std::string& ctx) {
  if (!j.is_object()) throw Error(ctx + ": expected a JSON object");
  const auto it = j.find(key);
  if (it == j.end()) throw Error(ctx + ": missing field '" + key + "'");
  return *it;
}

inline std::string json_string(const nlohmann::json& j, const char* key, const std::string& ctx) {
  const nlohmann::json& v = json_field(j, key, ctx);
  if (!v.is_string()) throw Error(ctx + ": field '" + key + "' must be a string");
  return v.get<std::string>();
}

inline const nlohmann::json& json_array(const nlohmann::json& j, const char* key,
                                        const std::string& ctx) {
  const nlohmann::json& v = json_field(j, key, ctx);
  if (!v.is_array()) throw Error(ctx + ": field '" + key + "' must be an array");
  return v;
}

inline bool json_bool(const nlohmann::json& j, const char* key, bool fallback,
                      const std::string& ctx) {
  if (!j.is_object()) throw Error(ctx + ": expected a JSON object");
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw Error(ctx + ": field '" + key + "' must be true or false");
  return it->get<bool>();
}

// A field that is a string or null/missing (returned as "").
inline std::string json_optional_string(const nlohmann::json& j, const char* key,
                                        const std::string& ctx) {
  if (!j.is_object()) throw Error(ctx + ": expected a JSON object");
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw Error(ctx + ": field '" + key + "' must be a string");
  return it->get<std::string>();
}

// {"pattern": {"String": s}} or {"pattern": {"Regex": r}}: sets is_regex and returns s or r.
inline std::string json_pattern(const nlohmann::json& j, const std::string& ctx, bool& is_regex) {
  const nlohmann::json& p = json_field(j, "pattern", ctx);
  if (p.is_object() && p.contains("String")) {
    is_regex = false;
    return json_string(p, "String", ctx + " pattern");
  }
  if (p.is_object() && p.contains("Regex")) {
    is_regex = true;
    return json_string(p, "Regex", ctx + " pattern");
  }
  throw Error(ctx + ": 'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
}

inline std::string json_string_pattern(const nlohmann::json& j, const std::string& ctx) {
  bool is_regex = false;
  std::string p = json_pattern(j, ctx, is_regex);
  if (is_regex) throw Error(ctx + ": a Regex pattern is not supported here (only String)");
  return p;
}

}  // namespace strata::tokenizer

#include "model/json_fields.h"

#include <limits>

#include "core/error.h"

namespace strata::model {

using nlohmann::json;

json parse_json_object(std::string_view text, std::string_view source, std::string_view what) {
  json value = parse_json_file(text, source, what);
  if (!value.is_object()) {
    throw Error(std::string(source) + ": " + std::string(what) + " is not a JSON object (got " +
                value.type_name() + ")");
  }
  return value;
}

JsonFields::JsonFields(const json& object, std::string_view source, std::string_view prefix)
    : object_(object), source_(source), prefix_(prefix) {}

const json* JsonFields::find(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(std::string_view key) const { return find(key) != nullptr; }

std::string JsonFields::name(std::string_view key) const {
  return "'" + std::string(prefix_) + std::string(key) + "'";
}

void JsonFields::check_in(std::string_view key, int64_t value, int64_t lo, int64_t hi) const {
  if (value < lo || value > hi) {
    fail(name(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
         std::to_string(value));
  }
}

void JsonFields::fail(const std::string& what) const {
  throw Error(std::string(source_) + ": " + what);
}

int64_t JsonFields::to_int(const json& value, std::string_view key) const {
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(name(key) + " is too large: " + std::to_string(u));
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  fail(name(key) + " must be an integer, got " + value.type_name() +
       (value.is_number_float() ? " " + bounded_dump(value) : ""));
}

int64_t JsonFields::get_int(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) fail("missing required key " + name(key));
  return to_int(*value, key);
}

std::optional<int64_t> JsonFields::opt_int(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) return std::nullopt;
  return to_int(*value, key);
}

double JsonFields::get_number(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) fail("missing required key " + name(key));
  if (!value->is_number()) fail(name(key) + " must be a number, got " + value->type_name());
  return value->get<double>();
}

std::optional<double> JsonFields::opt_number(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_number(key);
}

std::optional<bool> JsonFields::opt_bool(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) fail(name(key) + " must be true or false, got " + value->type_name());
  return value->get<bool>();
}

std::optional<std::string> JsonFields::opt_string(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) fail(name(key) + " must be a string, got " + value->type_name());
  return value->get<std::string>();
}

std::vector<int64_t> JsonFields::id_list(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) return {};
  std::vector<int64_t> ids;
  if (value->is_array()) {
    for (const json& item : *value) {
      if (!item.is_number_integer()) {
        fail(name(key) + " must be an integer or a list of integers, found a " + item.type_name() +
             " in the list");
      }
      ids.push_back(to_int(item, key));
    }
  } else if (value->is_number_integer()) {
    ids.push_back(to_int(*value, key));
  } else {
    fail(name(key) + " must be an integer or a list of integers, got " + value->type_name());
  }
  for (const int64_t id : ids) {
    if (id < 0) fail(name(key) + " holds a negative token id " + std::to_string(id));
  }
  return ids;
}

const json* JsonFields::opt_object(std::string_view key) const {
  const json* value = find(key);
  if (value != nullptr && !value->is_object()) {
    fail(name(key) + " must be an object, got " + value->type_name());
  }
  return value;
}

}  // namespace strata::model

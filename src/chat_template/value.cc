#include "chat_template/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "chat_template/template_error.h"

namespace strata::chat_template {

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = ValueKind::kString;
  v.s_ = std::move(s);
  return v;
}
void Value::check_storable(const Value& v) {
  if (v.kind_ == ValueKind::kNamespace) {
    throw TemplateError(TemplateErrorKind::kRuntime,
                        "a namespace cannot be stored in a list, dict or namespace");
  }
}

uint32_t Value::nested_depth(const Value& child) {
  check_storable(child);
  if (child.depth_ + 1 > kMaxValueDepth) {
    throw TemplateError(TemplateErrorKind::kLimitExceeded,
                        "value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  return child.depth_ + 1;
}

Value Value::list(List items) {
  Value v;
  for (const Value& item : items) v.depth_ = std::max(v.depth_, nested_depth(item));
  v.kind_ = ValueKind::kList;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::dict(Dict items) {
  Value v;
  for (const auto& [key, item] : items) v.depth_ = std::max(v.depth_, nested_depth(item));
  v.kind_ = ValueKind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::name_space(Dict items) {
  Value v = dict(std::move(items));
  v.kind_ = ValueKind::kNamespace;
  return v;
}
Value Value::callable(Callable fn) {
  Value v;
  v.kind_ = ValueKind::kCallable;
  v.fn_ = std::make_shared<const Callable>(std::move(fn));
  return v;
}

namespace {

template <typename Json>
Value convert(const Json& j, size_t depth) {
  if (depth > kMaxValueDepth) {
    throw TemplateError(TemplateErrorKind::kLimitExceeded,
                        "context nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::binary:
      return Value::none();
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(it.key(), convert(it.value(), depth + 1));
      return Value::dict(std::move(items));
    }
  }
  return Value::none();
}

void append_json_string(std::string& out, const std::string& s) {
  // nlohmann's dump escapes exactly what JSON.stringify escapes for valid UTF-8; invalid UTF-8 is
  // replaced rather than thrown on.
  out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string format_double(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  if (f == std::floor(f) && std::fabs(f) < 1e16) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", f);
    return buf;
  }
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  return buf;
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return convert(j, 0); }
Value Value::from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return b_;
    case ValueKind::kInt:
      return i_ != 0;
    case ValueKind::kFloat:
      return f_ != 0;
    case ValueKind::kString:
      return !s_.empty();
    case ValueKind::kList:
      return !list_->empty();
    case ValueKind::kDict:
      return !dict_->empty();
    case ValueKind::kNamespace:
    case ValueKind::kCallable:
      return true;
  }
  return false;
}

Value Value::get(const std::string& key) const {
  if (!is_mapping()) return {};
  for (const auto& [k, v] : *dict_) {
    if (k == key) return v;
  }
  return {};
}

std::string Value::to_output() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return "";
    case ValueKind::kString:
      return s_;
    case ValueKind::kCallable:
      return "<function>";
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace:
      return to_json(-1);
  }
  return "";
}

std::string Value::repr() const {
  if (kind_ == ValueKind::kString) return to_json(-1);
  return to_output();
}

std::string Value::to_json(int indent) const {
  std::string out;
  json_into(out, indent, 0);
  return out;
}

void Value::json_into(std::string& out, int indent, int depth) const {
  const bool pretty = indent > 0;
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kCallable:
      out += "null";
      return;
    case ValueKind::kBool:
      out += b_ ? "true" : "false";
      return;
    case ValueKind::kInt:
      out += std::to_string(i_);
      return;
    case ValueKind::kFloat:
      out += format_double(f_);
      return;
    case ValueKind::kString:
      append_json_string(out, s_);
      return;
    case ValueKind::kList: {
      out += '[';
      for (size_t n = 0; n < list_->size(); ++n) {
        if (n > 0) out += pretty ? "," : ", ";
        if (pretty) newline(depth + 1);
        (*list_)[n].json_into(out, indent, depth + 1);
      }
      if (pretty && !list_->empty()) newline(depth);
      out += ']';
      return;
    }
    case ValueKind::kDict:
    case ValueKind::kNamespace: {
      out += '{';
      for (size_t n = 0; n < dict_->size(); ++n) {
        if (n > 0) out += pretty ? "," : ", ";
        if (pretty) newline(depth + 1);
        append_json_string(out, (*dict_)[n].first);
        out += ": ";
        (*dict_)[n].second.json_into(out, indent, depth + 1);
      }
      if (pretty && !dict_->empty()) newline(depth);
      out += '}';
      return;
    }
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "undefined";
    case ValueKind::kNone:
      return "none";
    case ValueKind::kBool:
      return "boolean";
    case ValueKind::kInt:
      return "integer";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "string";
    case ValueKind::kList:
      return "list";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kNamespace:
      return "namespace";
    case ValueKind::kCallable:
      return "function";
  }
  return "?";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == ValueKind::kInt && b.kind() == ValueKind::kInt) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kBool:
      return a.as_bool() == b.as_bool();
    case ValueKind::kString:
      return a.as_string() == b.as_string();
    case ValueKind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t n = 0; n < x.size(); ++n) {
        if (!values_equal(x[n], y[n])) return false;
      }
      return true;
    }
    case ValueKind::kDict:
    case ValueKind::kNamespace: {
      const Dict& x = a.as_dict();
      if (x.size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : x) {
        if (!values_equal(v, b.get(k))) return false;
      }
      return true;
    }
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kCallable:
      return false;
  }
  return false;
}

}  // namespace strata::chat_template

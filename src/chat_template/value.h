#pragma once
// Value: what a chat-template expression evaluates to. Jinja's data model reduced to what chat
// templates use: undefined, none, bool, int, float, string, list, dict (insertion-ordered, as
// Python's), namespace (a dict with reference semantics, so `set ns.x = ...` inside a loop is seen
// after it) and callables (macros, builtins, bound string/dict methods).
//
// Lists and dicts are shared immutable nodes (shared_ptr<const ...>): copying a Value is O(1) and
// no operation mutates a list or dict in place, except a namespace's own attribute map.
//
// Values stay shallow and acyclic, so printing, comparing and destroying them never recurses
// deeply: a list or dict nests at most kMaxValueDepth levels, and a namespace cannot be stored in a
// list, dict or namespace (the only way to build a cycle). Breaking either rule throws
// TemplateError (kLimitExceeded resp. kRuntime).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::chat_template {

class Value;
class Evaluator;
inline constexpr size_t kMaxValueDepth = 256;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order; keys unique

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Callable = std::function<Value(Evaluator&, CallArgs&)>;

enum class ValueKind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kCallable
};

class Value {
 public:
  Value() = default;  // undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(List items);
  static Value dict(Dict items);
  static Value name_space(Dict items);
  static Value callable(Callable fn);
  // Throws TemplateError (kLimitExceeded) for JSON nested deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);
  // Throws TemplateError (kRuntime) if `v` is a namespace: see the class comment.
  static void check_storable(const Value& v);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_number() const { return kind_ == ValueKind::kInt || kind_ == ValueKind::kFloat; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_mapping() const { return kind_ == ValueKind::kDict || kind_ == ValueKind::kNamespace; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == ValueKind::kInt ? static_cast<double>(i_) : f_; }
  const std::string& as_string() const { return s_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& mutable_namespace() const { return *dict_; }
  const Callable& as_callable() const { return *fn_; }

  // Jinja truthiness: undefined, none, false, 0, "", [] and {} are false.
  bool truthy() const;
  // A dict or namespace member, or undefined.
  Value get(const std::string& key) const;
  // What `{{ value }}` prints (Python's str(): None, True, 1.5, ['a', 1], {'k': 'v'}).
  std::string to_output() const;
  // Python's repr(): strings quoted.
  std::string repr() const;
  // JSON text as Jinja's tojson writes it; indent < 0 means one line with ", " and ": ".
  std::string to_json(int indent) const;
  // A short name of the kind, for error messages.
  const char* type_name() const;

 private:
  void json_into(std::string& out, int indent, int depth) const;

  static uint32_t nested_depth(const Value& child);

  ValueKind kind_ = ValueKind::kUndefined;
  uint32_t depth_ = 0;  // list/dict nesting below this value
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> fn_;
};

// Jinja's ==: numbers compare by value, lists and dicts element-wise, different kinds unequal.
bool values_equal(const Value& a, const Value& b);

}  // namespace strata::chat_template

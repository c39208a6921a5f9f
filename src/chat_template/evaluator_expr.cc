// Expression evaluation of Evaluator (statements are in evaluator.cc).

#include <cstdint>
#include <optional>
#include <utility>

#include "chat_template/builtins.h"
#include "chat_template/evaluator.h"
#include "chat_template/template_error.h"
#include "chat_template/utf8_text.h"

namespace strata::chat_template {

Value Evaluator::eval(const Expr& expr) {
  charge(1);
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.literal;
    case ExprKind::kName:
      return lookup(expr.name);
    case ExprKind::kList: {
      List items;
      for (const auto& child : expr.children) items.push_back(eval(*child));
      return Value::list(std::move(items));
    }
    case ExprKind::kDict: {
      Dict items;
      for (size_t n = 0; n + 1 < expr.children.size(); n += 2) {
        Value key = eval(*expr.children[n]);
        if (!key.is_string()) runtime_error("dict keys must be strings");
        Value value = eval(*expr.children[n + 1]);
        bool replaced = false;
        for (auto& [k, v] : items) {
          if (k == key.as_string()) {
            v = value;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(key.as_string(), std::move(value));
      }
      return Value::dict(std::move(items));
    }
    case ExprKind::kAttribute:
      return get_attribute(eval(*expr.children[0]), expr.name);
    case ExprKind::kSubscript:
      return subscript(eval(*expr.children[0]), eval(*expr.children[1]));
    case ExprKind::kSlice:
      return slice(expr);
    case ExprKind::kCall:
      return eval_call(expr);
    case ExprKind::kFilter: {
      Value input = eval(*expr.children[0]);
      CallArgs args = eval_args(expr, 1);
      return apply_filter(*this, expr.name, input, args);
    }
    case ExprKind::kTest: {
      Value input = eval(*expr.children[0]);
      CallArgs args = eval_args(expr, 1);
      return Value::boolean(apply_test(*this, expr.name, input, args) != expr.negated);
    }
    case ExprKind::kUnary: {
      Value operand = eval(*expr.children[0]);
      if (expr.name == "not") return Value::boolean(!operand.truthy());
      if (!operand.is_number())
        runtime_error("unary '" + expr.name + "' on a " + operand.type_name());
      if (expr.name == "+") return operand;
      if (operand.kind() == ValueKind::kFloat) return Value::number(-operand.as_double());
      if (operand.as_int() == INT64_MIN) runtime_error("integer overflow");
      return Value::integer(-operand.as_int());
    }
    case ExprKind::kBinary:
      return eval_binary(expr);
    case ExprKind::kTernary:
      if (eval(*expr.children[1]).truthy()) return eval(*expr.children[0]);
      return expr.children[2] ? eval(*expr.children[2]) : Value();
  }
  return {};
}

Value Evaluator::eval_binary(const Expr& expr) {
  Value lhs = eval(*expr.children[0]);
  if (expr.name == "and") return lhs.truthy() ? eval(*expr.children[1]) : lhs;
  if (expr.name == "or") return lhs.truthy() ? lhs : eval(*expr.children[1]);
  Value rhs = eval(*expr.children[1]);
  return evaluate_operator(*this, expr.name, lhs, rhs);
}

CallArgs Evaluator::eval_args(const Expr& expr, size_t first) {
  CallArgs args;
  for (size_t n = first; n < expr.children.size(); ++n)
    args.positional.push_back(eval(*expr.children[n]));
  for (const auto& [key, value] : expr.keywords) args.keyword.emplace_back(key, eval(*value));
  return args;
}

Value Evaluator::eval_call(const Expr& expr) {
  Value callee = eval(*expr.children[0]);
  if (callee.kind() != ValueKind::kCallable) {
    std::string what =
        expr.children[0]->kind == ExprKind::kName || expr.children[0]->kind == ExprKind::kAttribute
            ? "'" + expr.children[0]->name + "'"
            : "expression";
    runtime_error(what + " is not callable (" + callee.type_name() + ")");
  }
  CallArgs args = eval_args(expr, 1);
  return callee.as_callable()(*this, args);
}

Value Evaluator::subscript(const Value& object, const Value& index) {
  if (object.is_mapping()) {
    if (!index.is_string()) return {};
    return object.get(index.as_string());
  }
  if (object.is_list() || object.is_string()) {
    if (index.kind() != ValueKind::kInt) runtime_error("list and string indices must be integers");
    std::vector<std::string> chars;
    if (object.is_string()) chars = utf8_chars(object.as_string());
    const auto size =
        static_cast<int64_t>(object.is_list() ? object.as_list().size() : chars.size());
    int64_t i = index.as_int() < 0 ? index.as_int() + size : index.as_int();
    if (i < 0 || i >= size) return {};
    if (object.is_list()) return object.as_list()[static_cast<size_t>(i)];
    return Value::string(chars[static_cast<size_t>(i)]);
  }
  if (object.is_undefined()) runtime_error("cannot subscript an undefined value");
  runtime_error(std::string("cannot subscript a ") + object.type_name());
}

Value Evaluator::slice(const Expr& expr) {
  Value object = eval(*expr.children[0]);
  auto bound = [&](size_t n) -> std::optional<int64_t> {
    if (!expr.children[n]) return std::nullopt;
    Value v = eval(*expr.children[n]);
    if (v.is_none()) return std::nullopt;
    if (v.kind() != ValueKind::kInt) runtime_error("slice indices must be integers");
    return v.as_int();
  };
  std::optional<int64_t> start = bound(1);
  std::optional<int64_t> stop = bound(2);
  int64_t step = bound(3).value_or(1);
  if (step == 0) runtime_error("slice step cannot be zero");
  if (step == INT64_MIN) runtime_error("slice step out of range");
  std::vector<std::string> chars;
  if (object.is_string()) {
    chars = utf8_chars(object.as_string());
  } else if (!object.is_list()) {
    runtime_error(std::string("cannot slice a ") + object.type_name());
  }
  const auto size = static_cast<int64_t>(object.is_list() ? object.as_list().size() : chars.size());
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t if_absent) {
    if (!v) return if_absent;
    int64_t x = *v;
    if (x < 0)
      x = x < -size ? (step < 0 ? -1 : 0) : x + size;
    else if (x >= size)
      x = step < 0 ? size - 1 : size;
    return x;
  };
  int64_t lo = clamp(start, step > 0 ? 0 : size - 1);
  int64_t hi = clamp(stop, step > 0 ? size : -1);
  List items;
  std::string text;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
    charge(1);
    if (object.is_list())
      items.push_back(object.as_list()[static_cast<size_t>(i)]);
    else
      text += chars[static_cast<size_t>(i)];
  }
  if (object.is_list()) return Value::list(std::move(items));
  return Value::string(std::move(text));
}

}  // namespace strata::chat_template

#include "chat_template/evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "chat_template/builtins.h"
#include "chat_template/template_error.h"
#include "chat_template/utf8_text.h"

namespace strata::chat_template {
namespace {

// `op` is one of __builtin_{add,sub,mul}_overflow.
template <typename Op>
int64_t checked(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op(x, y, &r)) Evaluator::runtime_error("integer overflow");
  return r;
}
bool add(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool mul(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) {
    Evaluator::runtime_error(std::string("cannot apply '") + op + "' to " + a.type_name() +
                             " and " + b.type_name());
  }
  const bool ints = a.kind() == ValueKind::kInt && b.kind() == ValueKind::kInt;
  if (ints) {
    int64_t x = a.as_int();
    int64_t y = b.as_int();
    if (op == "+") return Value::integer(checked(add, x, y));
    if (op == "-") return Value::integer(checked(sub, x, y));
    if (op == "*") return Value::integer(checked(mul, x, y));
    if (op == "//" || op == "%") {
      if (y == 0) Evaluator::runtime_error("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) Evaluator::runtime_error("integer overflow");
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**" && y >= 0) {
      int64_t result = 1;
      for (int64_t k = 0; k < y && result != 0 && x != 1; ++k) result = checked(mul, result, x);
      return Value::integer(result);
    }
  }
  double x = a.as_double();
  double y = b.as_double();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "**") return Value::number(std::pow(x, y));
  if (y == 0) Evaluator::runtime_error("division by zero");
  if (op == "/") return Value::number(x / y);
  if (op == "//") return Value::number(std::floor(x / y));
  if (op == "%") return Value::number(x - y * std::floor(x / y));
  Evaluator::runtime_error("unknown operator '" + op + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kString:
      if (!item.is_string()) Evaluator::runtime_error("'in <string>' needs a string on the left");
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& v : container.as_list()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case ValueKind::kDict:
    case ValueKind::kNamespace:
      return item.is_string() && !container.get(item.as_string()).is_undefined();
    case ValueKind::kUndefined:
      return false;
    default:
      Evaluator::runtime_error(std::string("'in' on a ") + container.type_name());
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == ValueKind::kInt && b.kind() == ValueKind::kInt) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string());
  Evaluator::runtime_error(std::string("cannot compare ") + a.type_name() + " with " +
                           b.type_name());
}

}  // namespace

Value evaluate_operator(Evaluator& ev, const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value::boolean(values_equal(a, b));
  if (op == "!=") return Value::boolean(!values_equal(a, b));
  if (op == "<") return Value::boolean(compare(a, b) < 0);
  if (op == "<=") return Value::boolean(compare(a, b) <= 0);
  if (op == ">") return Value::boolean(compare(a, b) > 0);
  if (op == ">=") return Value::boolean(compare(a, b) >= 0);
  if (op == "in") return Value::boolean(contains(b, a));
  if (op == "not in") return Value::boolean(!contains(b, a));
  const bool printable_a = a.is_string() || a.is_number() || a.kind() == ValueKind::kBool;
  const bool printable_b = b.is_string() || b.is_number() || b.kind() == ValueKind::kBool;
  if (op == "~" || (op == "+" && (a.is_string() || b.is_string()) && printable_a && printable_b)) {
    std::string x = a.to_output();
    std::string y = b.to_output();
    ev.charge_string(x.size() + y.size());
    return Value::string(x + y);
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    ev.charge_elements(a.as_list().size() + b.as_list().size());
    List items = a.as_list();
    items.insert(items.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(items));
  }
  if (op == "*" && a.is_string() && b.kind() == ValueKind::kInt) {
    const int64_t times = std::max<int64_t>(b.as_int(), 0);
    if (times > 0 && a.as_string().size() > SIZE_MAX / static_cast<size_t>(times)) {
      ev.charge_string(SIZE_MAX);
    }
    ev.charge_string(a.as_string().size() * static_cast<size_t>(times));
    std::string out;
    for (int64_t k = 0; k < times; ++k) out += a.as_string();
    return Value::string(std::move(out));
  }
  if (a.is_undefined() || b.is_undefined()) {
    Evaluator::runtime_error("'" + op + "' on an undefined value");
  }
  return arithmetic(op, a, b);
}

Evaluator::Evaluator(const RenderLimits& limits, const Value& variables) : limits_(limits) {
  scopes_.emplace_back();
  for (auto& [name, value] : global_functions()) scopes_[0][name] = value;
  if (variables.is_mapping()) {
    for (const auto& [name, value] : variables.as_dict()) scopes_[0][name] = value;
  }
}

void Evaluator::runtime_error(const std::string& what) {
  throw TemplateError(TemplateErrorKind::kRuntime, what);
}

void Evaluator::charge(size_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    throw TemplateError(
        TemplateErrorKind::kLimitExceeded,
        "chat template exceeded its step budget (" + std::to_string(limits_.max_steps) + " steps)");
  }
}

void Evaluator::charge_string(size_t bytes) {
  check_size(bytes);
  charge(bytes / kBytesPerStep);
}

void Evaluator::charge_elements(size_t count) {
  charge(count > limits_.max_steps ? count : count * kStepsPerElement);
}

void Evaluator::check_size(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    throw TemplateError(TemplateErrorKind::kLimitExceeded,
                        "chat template built a string over the output budget (" +
                            std::to_string(limits_.max_output_bytes) + " bytes)");
  }
}

std::string Evaluator::render(const Body& body) {
  std::string out;
  Flow flow = exec_body(body, out);
  if (flow != Flow::kNormal) runtime_error("'break' or 'continue' outside a loop");
  return out;
}

void Evaluator::append_output(std::string& out, const std::string& text) {
  if (text.size() > limits_.max_output_bytes - std::min(out.size(), limits_.max_output_bytes)) {
    throw TemplateError(TemplateErrorKind::kLimitExceeded,
                        "chat template output exceeded its budget (" +
                            std::to_string(limits_.max_output_bytes) + " bytes)");
  }
  charge(text.size() / kBytesPerStep);
  out += text;
}

Evaluator::Flow Evaluator::exec_body(const Body& body, std::string& out) {
  for (const auto& stmt : body) {
    Flow flow = exec(*stmt, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& stmt, std::string& out) {
  charge(1);
  switch (stmt.kind) {
    case StmtKind::kText:
      append_output(out, stmt.text);
      return Flow::kNormal;
    case StmtKind::kOutput:
      append_output(out, eval(*stmt.expr).to_output());
      return Flow::kNormal;
    case StmtKind::kSet:
      exec_set(stmt);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string captured;
      Flow flow = exec_body(stmt.body, captured);
      assign(stmt.targets[0], Value::string(std::move(captured)));
      return flow;
    }
    case StmtKind::kIf:
      for (const auto& [condition, body] : stmt.branches) {
        if (!condition || eval(*condition).truthy()) return exec_body(body, out);
      }
      return Flow::kNormal;
    case StmtKind::kFor:
      return exec_for(stmt, out);
    case StmtKind::kMacro:
      define_macro(stmt);
      return Flow::kNormal;
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Evaluator::exec_set(const Stmt& stmt) {
  Value value = eval(*stmt.expr);
  if (!stmt.attribute.empty()) {
    Value target = lookup(stmt.targets[0]);
    if (target.kind() != ValueKind::kNamespace) {
      runtime_error("cannot set attribute '" + stmt.attribute + "' of " + target.type_name() +
                    " '" + stmt.targets[0] + "' (only a namespace)");
    }
    Value::check_storable(value);
    Dict& members = target.mutable_namespace();
    for (auto& [key, member] : members) {
      if (key == stmt.attribute) {
        member = std::move(value);
        return;
      }
    }
    charge(members.size());
    members.emplace_back(stmt.attribute, std::move(value));
    return;
  }
  if (stmt.targets.size() == 1) {
    assign(stmt.targets[0], std::move(value));
    return;
  }
  if (!value.is_list() || value.as_list().size() != stmt.targets.size()) {
    runtime_error("cannot unpack " + std::string(value.type_name()) + " into " +
                  std::to_string(stmt.targets.size()) + " names");
  }
  for (size_t n = 0; n < stmt.targets.size(); ++n) assign(stmt.targets[n], value.as_list()[n]);
}

void Evaluator::bind_loop_targets(const Stmt& stmt, const Value& item) {
  if (stmt.targets.size() == 1) {
    assign(stmt.targets[0], item);
    return;
  }
  if (!item.is_list() || item.as_list().size() != stmt.targets.size()) {
    runtime_error("cannot unpack a loop item into " + std::to_string(stmt.targets.size()) +
                  " names");
  }
  for (size_t n = 0; n < stmt.targets.size(); ++n) assign(stmt.targets[n], item.as_list()[n]);
}

Evaluator::Flow Evaluator::exec_for(const Stmt& stmt, std::string& out) {
  Value iterable = eval(*stmt.expr);
  List items;
  switch (iterable.kind()) {
    case ValueKind::kList:
      items = iterable.as_list();
      break;
    case ValueKind::kDict:
    case ValueKind::kNamespace:
      for (const auto& [key, v] : iterable.as_dict()) items.push_back(Value::string(key));
      break;
    case ValueKind::kString:
      for (std::string& c : utf8_chars(iterable.as_string()))
        items.push_back(Value::string(std::move(c)));
      break;
    case ValueKind::kUndefined:
      break;
    default:
      runtime_error(std::string("cannot iterate over a ") + iterable.type_name());
  }
  charge_elements(items.size());
  scopes_.emplace_back();
  if (stmt.condition) {  // `for x in xs if c`: filtered before the loop, so loop.length counts kept
    List kept;
    for (const Value& item : items) {
      bind_loop_targets(stmt, item);
      if (eval(*stmt.condition).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const auto length = static_cast<int64_t>(items.size());
  Flow result = Flow::kNormal;
  for (int64_t n = 0; n < length; ++n) {
    charge(1);
    const Value& item = items[static_cast<size_t>(n)];
    bind_loop_targets(stmt, item);
    Dict loop = {{"index", Value::integer(n + 1)},
                 {"index0", Value::integer(n)},
                 {"revindex", Value::integer(length - n)},
                 {"revindex0", Value::integer(length - n - 1)},
                 {"first", Value::boolean(n == 0)},
                 {"last", Value::boolean(n == length - 1)},
                 {"length", Value::integer(length)},
                 {"previtem", n > 0 ? items[static_cast<size_t>(n - 1)] : Value()},
                 {"nextitem", n + 1 < length ? items[static_cast<size_t>(n + 1)] : Value()}};
    assign("loop", Value::dict(std::move(loop)));
    Flow flow = exec_body(stmt.body, out);
    if (flow == Flow::kBreak) break;
  }
  if (length == 0) result = exec_body(stmt.else_body, out);
  scopes_.pop_back();
  return result;
}

void Evaluator::define_macro(const Stmt& stmt) {
  const Stmt* macro = &stmt;
  assign(stmt.name, Value::callable([macro](Evaluator& ev, CallArgs& args) {
           return ev.call_macro(*macro, args);
         }));
}

Value Evaluator::call_macro(const Stmt& macro, CallArgs& args) {
  if (++call_depth_ > limits_.max_depth) {
    throw TemplateError(TemplateErrorKind::kLimitExceeded,
                        "macro calls nested deeper than " + std::to_string(limits_.max_depth));
  }
  if (args.positional.size() > macro.params.size()) {
    runtime_error("macro '" + macro.name + "' takes " + std::to_string(macro.params.size()) +
                  " arguments");
  }
  Scope frame;
  for (size_t n = 0; n < macro.params.size(); ++n) {
    const auto& [param, default_value] = macro.params[n];
    if (n < args.positional.size()) {
      frame[param] = args.positional[n];
    } else if (const Value* v = find_arg(args, SIZE_MAX, param.c_str())) {
      frame[param] = *v;
    } else if (default_value) {
      frame[param] = eval(*default_value);
    }
  }
  const size_t saved_base = base_;
  scopes_.push_back(std::move(frame));
  base_ = scopes_.size() - 1;
  std::string out;
  Flow flow = exec_body(macro.body, out);
  scopes_.pop_back();
  base_ = saved_base;
  --call_depth_;
  if (flow != Flow::kNormal) runtime_error("'break' or 'continue' outside a loop");
  return Value::string(std::move(out));
}

Value Evaluator::lookup(const std::string& name) const {
  for (size_t n = scopes_.size(); n-- > base_;) {
    auto it = scopes_[n].find(name);
    if (it != scopes_[n].end()) return it->second;
    if (n == 0) break;
  }
  if (base_ > 0) {
    auto it = scopes_[0].find(name);
    if (it != scopes_[0].end()) return it->second;
  }
  return {};
}

void Evaluator::assign(const std::string& name, Value value) {
  scopes_.back()[name] = std::move(value);
}

}  // namespace strata::chat_template

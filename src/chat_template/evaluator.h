#pragma once
// Evaluator: runs a parsed chat template over its variables and produces the text.
//
// Scopes follow Jinja: the template's top level is one scope; a for loop opens a scope that its
// `set`s write to (so they do not leak out, hence `namespace`); a macro call sees its parameters
// and the top-level scope only. Every operation is charged against RenderLimits (see
// chat_template.h); running out throws TemplateError(kLimitExceeded).
//
// Not thread-safe; one Evaluator per render.

#include <string>
#include <unordered_map>
#include <vector>

#include "chat_template/ast.h"
#include "chat_template/chat_template.h"
#include "chat_template/value.h"

namespace strata::chat_template {

class Evaluator {
 public:
  Evaluator(const RenderLimits& limits, const Value& variables);

  std::string render(const Body& body);

  // Budget accounting, also used by the builtins.
  void charge(size_t steps);
  void charge_string(size_t bytes);    // steps for building a string of `bytes`, and its size cap
  void check_size(size_t bytes);       // the size cap alone, for strings grown piece by piece
  void charge_elements(size_t count);  // before building a list of `count` elements

  [[noreturn]] static void runtime_error(const std::string& what);
  // A macro's body run with `args` bound to its parameters; the text it outputs.
  Value call_macro(const Stmt& macro, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& stmt, std::string& out);
  void exec_set(const Stmt& stmt);
  Flow exec_for(const Stmt& stmt, std::string& out);
  void bind_loop_targets(const Stmt& stmt, const Value& item);
  void define_macro(const Stmt& stmt);

  Value eval(const Expr& expr);
  Value eval_binary(const Expr& expr);
  Value eval_call(const Expr& expr);
  CallArgs eval_args(const Expr& expr, size_t first);
  Value subscript(const Value& object, const Value& index);
  Value slice(const Expr& expr);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void append_output(std::string& out, const std::string& text);

  RenderLimits limits_;
  size_t steps_ = 0;
  size_t call_depth_ = 0;
  std::vector<Scope> scopes_;  // [0]: globals and the template's top level
  size_t base_ = 0;            // lookups see scopes_[base_..] and scopes_[0]
};

// A binary operator other than `and`/`or`: comparisons, `in`, arithmetic, `~`, and `+`/`*` on
// strings and lists.
Value evaluate_operator(Evaluator& ev, const std::string& op, const Value& a, const Value& b);

}  // namespace strata::chat_template

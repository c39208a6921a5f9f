#pragma once
// The syntax tree of a chat template. One generic node per kind of expression and statement keeps
// the tree small; the comments on each kind say which fields it uses.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat_template/value.h"

namespace strata::chat_template {

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children: elements
  kDict,       // children: key0, value0, key1, value1, ...
  kAttribute,  // children[0].name
  kSubscript,  // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]]; absent parts are null
  kCall,       // children[0](children[1..], keywords)
  kFilter,     // children[0] | name(children[1..], keywords)
  kTest,       // children[0] is [not] name(children[1..]); negated
  kUnary,      // name ("not", "-", "+") children[0]
  kBinary,   // children[0] name children[1]; name is the operator ("and", "in", "not in", "~", ...)
  kTernary,  // children[0] if children[1] else children[2] (null: undefined)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  size_t offset = 0;
  std::string name;
  Value literal;
  bool negated = false;
  size_t depth = 1;  // of this subtree; the parser keeps it under its max_depth
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kSet,       // targets (one name, or several to unpack) = expr; or targets[0].attribute = expr
  kSetBlock,  // {% set targets[0] %}body{% endset %}
  kIf,        // branches: (condition, body); an else branch has a null condition
  kFor,       // for targets in expr [if condition]: body [else: else_body]
  kMacro,     // macro name(params with defaults): body
  kBreak,
  kContinue,
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind;
  size_t offset = 0;
  std::string text;
  std::string name;
  std::string attribute;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;
  Body body;
  Body else_body;
};

}  // namespace strata::chat_template

#pragma once
// Parser: tokens -> syntax tree, by recursive descent with Jinja's operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary - +, then postfix `.attr`, `[i]`, `[a:b:c]`, `(args)`, `| filter`, `is test`.
//
// Nesting deeper than `max_depth` (brackets, blocks) is a syntax error rather than a deep stack.
// Cost: linear in the number of tokens.

#include <cstddef>
#include <string_view>

#include "chat_template/ast.h"

namespace strata::chat_template {

// Throws TemplateError (kSyntax) naming what was expected and where.
Body parse_template(std::string_view source, size_t max_depth);

}  // namespace strata::chat_template

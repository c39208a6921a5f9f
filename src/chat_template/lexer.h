#pragma once
// The lexer of chat templates: template source -> tokens, with Jinja's whitespace control applied.
//
// Whitespace handling is that of the Hugging Face chat-template environments (transformers sets
// trim_blocks and lstrip_blocks; @huggingface/jinja applies both as a text pass before lexing):
// one trailing newline of the source is dropped; spaces and tabs before a `{%`/`{#` that starts a
// line are removed; a newline right after `%}`, `#}` or `-}}` is removed; `{%-`/`{{-`/`{#-` strip
// the whitespace before the tag and `-%}`/`-}}`/`-#}` the whitespace after it.
//
// Cost: linear in the source length.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::chat_template {

enum class TokenKind {
  kText,     // literal template text
  kComment,  // {# ... #}; kept so whitespace control sees it, skipped by the parser
  kOpenStatement,
  kCloseStatement,
  kOpenExpression,
  kCloseExpression,
  kName,
  kString,  // value already unescaped
  kInteger,
  kFloat,
  kOperator,  // punctuation: ( ) [ ] { } , . : | + - * / // % ** ~ = == != < <= > >=
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string value;
  size_t offset;  // into the preprocessed source, for error messages
};

// Throws TemplateError (kSyntax) for an unterminated string, comment or tag, or a stray character.
std::vector<Token> tokenize(std::string_view source);

// The whitespace pass described above; exposed for tests.
std::string preprocess_source(std::string_view source);

}  // namespace strata::chat_template

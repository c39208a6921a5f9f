#pragma once
// TemplateError: how the lexer, parser and evaluator reject a template or stop a render. It never
// leaves the library: render_chat_template catches it and returns a Status. Exceptions keep the
// recursive-descent code free of error plumbing; rendering runs once per request, not per step.

#include <stdexcept>
#include <string>

namespace strata::chat_template {

enum class TemplateErrorKind {
  kSyntax,         // the template is malformed
  kRuntime,        // a type error, an unknown filter, raise_exception(...)
  kLimitExceeded,  // a RenderLimits budget ran out
};

class TemplateError : public std::runtime_error {
 public:
  TemplateError(TemplateErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  TemplateErrorKind kind() const { return kind_; }

 private:
  TemplateErrorKind kind_;
};

}  // namespace strata::chat_template

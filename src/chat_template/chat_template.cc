#include "chat_template/chat_template.h"

#include <nlohmann/json.hpp>

#include "chat_template/evaluator.h"
#include "chat_template/parser.h"
#include "chat_template/template_error.h"

namespace strata::chat_template {

Result<std::string> render_chat_template(const std::string& source,
                                         const nlohmann::ordered_json& context,
                                         const RenderLimits& limits) {
  if (!context.is_object() && !context.is_null()) {
    return Status::InvalidArgument("chat template context must be a JSON object");
  }
  if (source.size() > limits.max_output_bytes) {
    return Status::ResourceExhausted("chat template source is larger than the output budget");
  }
  try {
    Body body = parse_template(source, limits.max_depth);
    Evaluator evaluator(limits, Value::from_json(context));
    return evaluator.render(body);
  } catch (const TemplateError& e) {
    switch (e.kind()) {
      case TemplateErrorKind::kSyntax:
      case TemplateErrorKind::kRuntime:
        return Status::InvalidArgument(e.what());
      case TemplateErrorKind::kLimitExceeded:
        return Status::ResourceExhausted(e.what());
    }
    return Status::Internal(e.what());
  }
}

}  // namespace strata::chat_template

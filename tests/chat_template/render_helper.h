#pragma once
// Test helper: renders a template with a JSON context, returning the text or "error: <status>".

#include <string>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"

namespace strata::chat_template {

inline std::string render(const std::string& source, const char* context_json = "{}",
                          const RenderLimits& limits = {}) {
  Result<std::string> r =
      render_chat_template(source, nlohmann::ordered_json::parse(context_json), limits);
  return r.ok() ? *r : "error: " + r.status().to_string();
}

}  // namespace strata::chat_template

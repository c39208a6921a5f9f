#pragma once
// Rendering Hugging Face chat templates: the subset of Jinja that tokenizer_config.json's
// chat_template sources use (docs/chat-templates.md lists it), checked byte for byte against the
// @huggingface/jinja package on real templates.
//
// A render is bounded: RenderLimits caps the interpreter's steps, the size of the output and of any
// string it builds, and nesting (template syntax and macro calls), so a hostile template or message
// costs at most a known amount of CPU and memory and ends with a kResourceExhausted status.
// Thread-safe: each call is independent.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace strata::tokenizer {
class Tokenizer;
}

namespace strata::chat_template {

struct RenderLimits {
  // Interpreter steps: one per expression and statement evaluated and per loop iteration,
  // kStepsPerElement per list element built, one per kBytesPerStep bytes of string built. A
  // conversation of a thousand messages takes about 10^5.
  size_t max_steps = 2'000'000;
  // The largest output, and the largest string any expression may build.
  size_t max_output_bytes = 16u << 20;
  // The deepest syntax nesting and macro call chain.
  size_t max_depth = 200;
};
inline constexpr size_t kBytesPerStep = 64;
inline constexpr size_t kStepsPerElement = 8;  // so lists stay far smaller than max_steps values

// Renders `source` with `context` as its variables (an object: messages, add_generation_prompt,
// bos_token, ...). Errors: kInvalidArgument for a malformed template, a type error, an unknown
// filter or raise_exception(...); kResourceExhausted when a limit is reached.
Result<std::string> render_chat_template(const std::string& source,
                                         const nlohmann::ordered_json& context,
                                         const RenderLimits& limits = {});

// Renders the tokenizer's chat_template over `messages` (a JSON array of {role, content, ...}).
// `options` (an object, or null) holds add_generation_prompt (default true) and any extra
// variables (enable_thinking, ...). bos_token and eos_token are the strings of the tokenizer's
// bos/eos ids ("" when it has none), unless `options` sets them. kNotFound when the tokenizer has
// no chat template.
Result<std::string> render_tokenizer_chat_template(const tokenizer::Tokenizer& tokenizer,
                                                   const nlohmann::ordered_json& messages,
                                                   const nlohmann::ordered_json& options,
                                                   const RenderLimits& limits = {});

// Whether `name` is a variable the server's render sets (messages, add_generation_prompt,
// bos_token, eos_token), one Hugging Face's apply_chat_template sets (tools, documents,
// continue_final_message, ...) or a global function of the template (raise_exception, range, ...):
// request-supplied options (chat_template_kwargs) may not replace them.
bool is_reserved_template_variable(std::string_view name);

}  // namespace strata::chat_template

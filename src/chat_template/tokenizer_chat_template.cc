// render_tokenizer_chat_template: the chat template and special tokens a Tokenizer stores.

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace strata::chat_template {
namespace {

std::string token_text(const tokenizer::Tokenizer& tok, std::optional<int32_t> id) {
  if (!id) return "";
  return tok.id_to_token(*id).value_or("");
}

}  // namespace

bool is_reserved_template_variable(std::string_view name) {
  static constexpr std::string_view kReserved[] = {
      "messages",  "add_generation_prompt", "continue_final_message", "bos_token", "eos_token",
      "pad_token", "unk_token", "tools", "documents", "chat_template", "tokenize",
      "raise_exception", "strftime_now", "range", "namespace", "dict", "cycler", "joiner",
      "lipsum"};
  for (const std::string_view r : kReserved) {
    if (name == r) return true;
  }
  return false;
}

Result<std::string> render_tokenizer_chat_template(const tokenizer::Tokenizer& tokenizer,
                                                   const nlohmann::ordered_json& messages,
                                                   const nlohmann::ordered_json& options,
                                                   const RenderLimits& limits) {
  if (tokenizer.chat_template().empty()) {
    return Status::NotFound("the tokenizer has no chat_template in tokenizer_config.json");
  }
  if (!options.is_null() && !options.is_object()) {
    return Status::InvalidArgument("chat template options must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["add_generation_prompt"] = true;
  context["bos_token"] = token_text(tokenizer, tokenizer.bos_token_id());
  context["eos_token"] = token_text(tokenizer, tokenizer.eos_token_id());
  if (options.is_object()) {
    for (auto it = options.begin(); it != options.end(); ++it) context[it.key()] = it.value();
  }
  return render_chat_template(tokenizer.chat_template(), context, limits);
}

}  // namespace strata::chat_template

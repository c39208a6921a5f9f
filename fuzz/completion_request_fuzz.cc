// libFuzzer target: request bodies through the parsers of POST /v1/completions and
// /v1/chat/completions, with strata-tiny's tokenizer and chat template. Any input must give a
// request or an OpenAI error, never a crash; an accepted request's prompts hold in-vocabulary ids
// and fit max_model_len, and an accepted chat prompt opens no turn (<|im_start|>) but the
// template's own: one per message and the generation prompt, whatever the messages say; an
// accepted structured output names the field that set it. A second served model writes Hermes
// tool calls, so tools and tool_choice are read too: a forced call is a constraint named by
// tool_choice in that format, and only a chat request parses calls.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "core/check.h"
#include "server/completion_request.h"
#include "tokenizer/tokenizer.h"

namespace {

void check(const std::variant<strata::server::CompletionRequest, strata::server::ApiError>& parsed,
           std::string_view body, int32_t im_start) {
  if (const auto* r = std::get_if<strata::server::CompletionRequest>(&parsed)) {
    if (r->chat) {
      // Accepted, so it parses and nests at most 64 deep.
      const size_t num_messages = nlohmann::json::parse(body)["messages"].size();
      const auto turns = std::count(r->prompts[0].begin(), r->prompts[0].end(), im_start);
      STRATA_CHECK(static_cast<size_t>(turns) <= num_messages + 1,
                   "message text opened a turn of its own");
    }
    STRATA_CHECK(!r->prompts.empty() && r->n >= 1 && r->n <= 16, "accepted a bad request");
    // A constraint is named by the field that set it (its compile errors cite it) and is valid.
    STRATA_CHECK(r->params.structured.active() == !r->structured_field.empty(),
                 "a structured output without its field, or a field without one");
    STRATA_CHECK(r->params.validate(8192).ok(), "accepted invalid sampling params");
    STRATA_CHECK(r->chat || !r->tool_call_format, "a completion that parses tool calls");
    if (r->structured_field == "tool_choice") {
      STRATA_CHECK(r->tool_call_format && r->params.structured.prefix == "<tool_call>\n",
                   "a forced tool call outside the model's format");
    }
    for (const auto& p : r->prompts) {
      STRATA_CHECK(!p.empty(), "accepted an empty prompt");
      STRATA_CHECK(static_cast<int64_t>(p.size()) + r->params.max_tokens <= 4096,
                   "accepted a prompt beyond max_model_len");
      for (const int32_t id : p) STRATA_CHECK(id >= 0 && id < 8192, "accepted a bad token id");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const strata::tokenizer::Tokenizer tokenizer =
      strata::tokenizer::Tokenizer::load(STRATA_FUZZ_MODEL_DIR);
  static const strata::server::ServedModel model{"strata-tiny", 8192, 4096, &tokenizer, 16};
  static const strata::server::ServedModel hermes{
      "strata-tiny", 8192, 4096, &tokenizer, 16, false, strata::server::ToolCallFormat::kHermes};
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  static const int32_t im_start = *tokenizer.token_to_id("<|im_start|>");
  for (const bool chat : {false, true}) {
    check(strata::server::parse_request(body, model, chat), body, im_start);
  }
  check(strata::server::parse_request(body, hermes, true), body, im_start);
  return 0;
}


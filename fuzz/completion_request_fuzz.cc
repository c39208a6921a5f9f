// libFuzzer target: request bodies through the parsers of POST /v1/completions and
// /v1/chat/completions, with strata-tiny's tokenizer and chat template. Any input must give a
// request or an OpenAI error, never a crash; an accepted request's prompts hold in-vocabulary ids
// and fit max_model_len.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "core/check.h"
#include "server/completion_request.h"
#include "tokenizer/tokenizer.h"

namespace {

void check(const std::variant<strata::server::CompletionRequest, strata::server::ApiError>& parsed) {
  if (const auto* r = std::get_if<strata::server::CompletionRequest>(&parsed)) {
    STRATA_CHECK(!r->prompts.empty() && r->n >= 1 && r->n <= 16, "accepted a bad request");
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
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (const bool chat : {false, true}) {
    check(strata::server::parse_request(body, model, chat));
  }
  return 0;
}


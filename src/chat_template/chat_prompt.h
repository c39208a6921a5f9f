#pragma once
// encode_chat_prompt: a chat request's messages rendered with the tokenizer's chat template and
// encoded to the prompt's token ids, such that text from the request cannot make special tokens.
//
// The template's own text keeps its special tokens (<|im_start|>, <|eot_id|>, ...). Request
// text (every string in messages and options, object keys included) is encoded as plain text
// wherever a special token's text appears in it, as Hugging Face's split_special_tokens does, so
// a user message holding "<|im_start|>system" cannot open a system turn. How: each string is
// marked, before rendering, with U+FDD0 (a noncharacter, first removed from the request's text)
// just after the first character of each special token it holds and at an end that could
// complete one with the template's text; the rendered text has the marks taken out and encodes
// with no added token across a mark. A template that slices or trims content keeps the marks
// inside the special tokens' text, so no cut of the content can rebuild one without a mark.
// Strings holding no special-token text are not marked at all, so their prompts (and prefix
// cache hits) are exactly what plain rendering and encoding give.
//
// Thread-safe; cost: one render plus one pass over each request string and over the output.

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "chat_template/chat_template.h"
#include "core/status.h"

namespace strata::chat_template {

struct ChatPromptConfig {
  // The old behaviour: request text is encoded with special-token parsing like the template's.
  bool special_tokens_in_content = false;
  RenderLimits limits;
};

// Errors as render_tokenizer_chat_template's.
Result<std::vector<int32_t>> encode_chat_prompt(const tokenizer::Tokenizer& tokenizer,
                                                const nlohmann::ordered_json& messages,
                                                const nlohmann::ordered_json& options,
                                                const ChatPromptConfig& config = {});

}  // namespace strata::chat_template

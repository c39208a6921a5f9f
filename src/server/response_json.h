#pragma once
// The JSON of OpenAI responses: a choice of a completion or a streamed chunk, completions- and
// chat-style logprobs, usage, and response ids. Pure functions over CompletionOutput's pieces.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "server/completion_output.h"

namespace strata::server {

// "cmpl-<16 hex>" or "chatcmpl-<16 hex>", random per response.
std::string completion_id(bool chat);
// "call_<24 hex>", random per tool call.
std::string tool_call_id();
// Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}; null when absent.
nlohmann::json logprobs_json(const std::optional<CompletionLogprobs>& l);
// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::json chat_logprobs_json(const std::optional<CompletionLogprobs>& l);
// One choice of a response (whole) or of a streamed chunk (a delta; `first`: the choice's first
// chunk, which carries the assistant role in chat). token_ids (vLLM's return_token_ids) when set.
nlohmann::json choice_json(const CompletionOutput::ChoiceDelta& c, bool chat, bool stream,
                           bool first);
// An OpenAI usage object; prompt_tokens_details.kv_tier_tokens {host, disk} only when a KV tier
// served some of the prompt.
nlohmann::json usage_json(int64_t prompt, int64_t completion, const CachedTokens& cached);

}  // namespace strata::server

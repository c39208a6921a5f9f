#pragma once
// POST /v1/completions: the request body, parsed and validated into what the engine runs. Every
// problem is an ApiError naming the field (400), with OpenAI's codes where they exist
// (context_length_exceeded).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "server/tool_call_parser.h"
#include "strata/kv_eviction.h"
#include "strata/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// What the server serves: the name clients ask for, and the limits requests are checked against.
struct ServedModel {
  std::string name;
  int32_t vocab_size = 0;
  int64_t max_model_len = 0;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // nullptr: token-id prompts only
  int32_t max_n = 16;
  // Chat: special-token text in messages is encoded as special tokens, as the template's own is
  // (serve --tokenize-special-in-content). Off: it is plain text (chat_template/chat_prompt.h).
  bool special_tokens_in_content = false;
  // The format the output's tool calls are written in (serve --tool-call-parser, or the one the
  // chat template shows); nullopt: requests with tools are refused.
  std::optional<ToolCallFormat> tool_call_format = std::nullopt;
  // Under token eviction a request holds at most its budget's blocks, so it may be as long as
  // the model allows (the engine checks that its budget fits the pool): the engine's
  // max_model_len, and whether the server evicts requests that name no policy.
  int64_t max_evicting_len = 0;
  bool evicts_by_default = false;
};

struct CompletionRequest {
  bool chat = false;                          // /v1/chat/completions
  std::vector<std::vector<int32_t>> prompts;  // one per prompt, token ids (chat: the rendered one)
  // Each prompt's text as the client sent it, "" for token ids and chat (echo repeats it as
  // given, not as the tokenizer's decode of it, which would show the BOS token).
  std::vector<std::string> prompt_texts;
  SamplingParams params;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;
  std::vector<std::string> stop;  // stop strings (text), matched on the decoded output
  std::string cache_salt;
  std::string user;
  bool return_tokens_as_token_ids = false;
  bool return_token_ids = false;  // vLLM: each choice (and streamed delta) carries token_ids
  // The field that set params.structured (response_format, guided_json, ...), which the
  // engine's verdict on compiling it names.
  std::string structured_field;
  // Chat with tools (tool_choice other than "none"): the output's tool calls are parsed in this
  // format and returned as tool_calls.
  std::optional<ToolCallFormat> tool_call_format;
  // "kv_eviction": {policy, budget_tokens, sink_tokens, window_tokens} (docs/kv-eviction.md);
  // the fields it leaves out take the server's --kv-eviction-policy / --kv-budget-tokens.
  std::optional<KvEvictionParams> kv_eviction;
};

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   const ServedModel& model);
// POST /v1/chat/completions: messages (system / user / assistant / tool / developer; string or
// text-part content; an assistant turn's tool_calls, a tool result's tool_call_id) rendered with
// the model's chat template (tools and chat_template_kwargs passed to it), tool_choice,
// max_completion_tokens, logprobs + top_logprobs, and the sampling fields completions take.
std::variant<CompletionRequest, ApiError> parse_chat_request(std::string_view body,
                                                             const ServedModel& model);
std::variant<CompletionRequest, ApiError> parse_request(std::string_view body,
                                                        const ServedModel& model, bool chat);

}  // namespace strata::server

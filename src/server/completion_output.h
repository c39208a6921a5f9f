#pragma once
// What a completion request returns, built from the engine's step outputs: each choice's text
// (streaming detokenization, stop strings matched on the text and cut before them), its finish
// reason, OpenAI completions-style logprobs, the tool calls parsed out of the text (chat with
// tools), and the usage counts. The same object serves the
// streaming path (take_delta after every step) and the plain one (the accumulated text).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/completion_request.h"
#include "server/tool_call_parser.h"
#include "strata/engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// OpenAI completions logprobs: parallel lists, one entry per token (a null entry for the first
// echoed prompt token). text_offset: where the token's text starts in the choice's text, in
// characters (code points), as OpenAI and vLLM count them; a token with no text of its own there
// (a BOS the tokenizer added, a skipped special token) gets the offset of the text after it.
struct CompletionLogprobs {
  std::vector<std::string> tokens;
  std::vector<std::optional<float>> token_logprobs;
  std::vector<std::optional<std::vector<std::pair<std::string, float>>>> top_logprobs;
  std::vector<int32_t> text_offset;
  size_t size() const { return tokens.size(); }
};

// Prompt tokens served from cached KV, and of those the ones the KV tiers brought back.
struct CachedTokens {
  int64_t total = 0;
  int64_t host_tier = 0;
  int64_t disk_tier = 0;
};

class CompletionOutput {
 public:
  // One per engine request (one prompt): choices [index_base, index_base + n).
  CompletionOutput(const CompletionRequest& request, const ServedModel& model, size_t prompt_idx);

  // Folds one step's output in. Returns true when every choice has finished, stop strings
  // included (then the engine request can be cancelled if it is still running).
  bool add(const RequestOutput& out);
  bool finished() const;

  struct ToolCall {
    int32_t index = 0;  // the call's place among its choice's calls
    std::string id;     // "call_<24 hex>"
    std::string name;
    std::string arguments;  // a JSON object's text
  };
  struct ChoiceDelta {
    int32_t index;
    std::string text;                            // with tools: the text outside the tool calls
    std::optional<CompletionLogprobs> logprobs;  // when asked
    std::optional<std::string> finish_reason;
    // The new token ids, when asked (return_token_ids): up to a stop string, never held back.
    std::optional<std::vector<int32_t>> token_ids;
    std::vector<ToolCall> tool_calls = {};  // chat with tools: the calls, whole ones only
  };
  // Streaming: what is new since the last call (text held back while it could start a stop
  // string).
  std::vector<ChoiceDelta> take_deltas();
  // Whole choices (non-streaming): text, logprobs and finish reason of each.
  std::vector<ChoiceDelta> choices() const;

  int64_t prompt_tokens() const { return static_cast<int64_t>(prompt_.size()); }
  int64_t completion_tokens() const;
  const CachedTokens& cached_tokens() const { return cached_tokens_; }

 private:
  struct Choice {
    int32_t index = 0;
    std::optional<tokenizer::StreamDecoder> decoder;
    std::string text;        // final, sent or to send
    size_t sent = 0;         // bytes of text already taken by take_deltas
    std::string held;        // decoded but held back (could start a stop string)
    size_t num_chars = 0;    // code points in text + held: where the next token's text starts
    int32_t num_tokens = 0;  // counted up to the stop
    bool stopped = false;
    std::optional<std::string> finish_reason;
    CompletionLogprobs logprobs;
    size_t logprobs_sent = 0;
    std::vector<int32_t> token_ids;  // counted tokens, when return_token_ids
    size_t token_ids_sent = 0;
    // Chat with tools: text runs through the parser; what it releases outside the calls is
    // `content` (what the client sees as text) and the calls are `calls`.
    std::optional<ToolCallStreamParser> tools;
    size_t parsed = 0;  // bytes of text fed to the parser
    bool parse_finished = false;
    std::string content;
    std::vector<ToolCall> calls;
    size_t calls_sent = 0;
  };
  struct Sent {  // how much of a choice a delta starts after
    size_t text = 0, logprobs = 0, token_ids = 0, calls = 0;
  };
  // The choice's text as the client sees it: the content outside tool calls, or all of it.
  static const std::string& shown(const Choice& c) { return c.tools ? c.content : c.text; }
  void parse_tools(Choice& c);
  void add_tokens(Choice& c, const CompletionDelta& d);
  void add_logprob(Choice& c, const TokenLogprobs* lp, int32_t token, size_t text_offset);
  ChoiceDelta delta_of(const Choice& c, Sent from) const;
  void release(Choice& c, bool all);
  std::string token_text(int32_t id) const;
  std::vector<int32_t> prompt_offsets() const;

  const CompletionRequest& request_;
  const ServedModel& model_;
  std::vector<int32_t> prompt_;
  std::string_view prompt_text_;  // as sent, "" for token ids
  std::vector<Choice> choices_;
  size_t max_stop_len_ = 0;
  CachedTokens cached_tokens_;
};

}  // namespace strata::server

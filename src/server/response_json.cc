#include "server/response_json.h"

#include <cstdio>
#include <random>

namespace strata::server {

using nlohmann::json;

namespace {

// 64 random bits for the ids (a generator per thread, seeded from the device).
unsigned long long random_bits() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return static_cast<unsigned long long>(rng());
}

}  // namespace

std::string completion_id(bool chat) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s-%016llx", chat ? "chatcmpl" : "cmpl", random_bits());
  return buf;
}

std::string tool_call_id() {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "call_%08llx%016llx", random_bits() & 0xffffffffu,
                random_bits());
  return buf;
}

json logprobs_json(const std::optional<CompletionLogprobs>& l) {
  if (!l) return nullptr;
  json top = json::array();
  for (const auto& t : l->top_logprobs) {
    if (!t) {
      top.push_back(nullptr);
      continue;
    }
    json d = json::object();
    for (const auto& [token, value] : *t) d[token] = value;
    top.push_back(d);
  }
  json lp = json::array();
  for (const auto& v : l->token_logprobs) lp.push_back(v ? json(*v) : json(nullptr));
  return {{"tokens", l->tokens},
          {"token_logprobs", lp},
          {"top_logprobs", top},
          {"text_offset", l->text_offset}};
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (const unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

}  // namespace

json chat_logprobs_json(const std::optional<CompletionLogprobs>& l) {
  if (!l) return nullptr;
  json content = json::array();
  for (size_t i = 0; i < l->size(); ++i) {
    json top = json::array();
    if (l->top_logprobs[i]) {
      for (const auto& [token, value] : *l->top_logprobs[i]) {
        top.push_back({{"token", token}, {"logprob", value}, {"bytes", bytes_of(token)}});
      }
    }
    content.push_back({{"token", l->tokens[i]},
                       {"logprob", l->token_logprobs[i].value_or(0.0f)},
                       {"bytes", bytes_of(l->tokens[i])},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json choice_json(const CompletionOutput::ChoiceDelta& c, bool chat, bool stream, bool first) {
  json out = {{"index", c.index},
              {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json(nullptr)}};
  if (c.token_ids) out["token_ids"] = *c.token_ids;
  if (!chat) {
    out["text"] = c.text;
    out["logprobs"] = logprobs_json(c.logprobs);
    return out;
  }
  out["logprobs"] = chat_logprobs_json(c.logprobs);
  // OpenAI's tool calls: whole in a message; streamed, each call's one delta carries its index,
  // id, name and all of its arguments.
  json calls = json::array();
  for (const auto& t : c.tool_calls) {
    json call = {{"id", t.id},
                 {"type", "function"},
                 {"function", {{"name", t.name}, {"arguments", t.arguments}}}};
    if (stream) call["index"] = t.index;
    calls.push_back(std::move(call));
  }
  if (!stream) {
    // A message of tool calls alone (whitespace around them aside) has null content, as
    // OpenAI's.
    const bool blank = c.text.find_first_not_of(" \t\r\n") == std::string::npos;
    out["message"] = {{"role", "assistant"},
                      {"content", blank && !calls.empty() ? json(nullptr) : json(c.text)}};
    if (!calls.empty()) out["message"]["tool_calls"] = std::move(calls);
  } else {
    out["delta"] = json::object();
    if (first) out["delta"]["role"] = "assistant";
    if (!c.text.empty() || (first && calls.empty())) out["delta"]["content"] = c.text;
    if (!calls.empty()) out["delta"]["tool_calls"] = std::move(calls);
  }
  return out;
}

json usage_json(int64_t prompt, int64_t completion, const CachedTokens& cached) {
  json details = {{"cached_tokens", cached.total}};
  if (cached.host_tier + cached.disk_tier > 0) {
    details["kv_tier_tokens"] = {{"host", cached.host_tier}, {"disk", cached.disk_tier}};
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", std::move(details)}};
}

}  // namespace strata::server

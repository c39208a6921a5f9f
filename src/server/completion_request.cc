#include "server/completion_request.h"

#include <nlohmann/json.hpp>

#include <optional>

#include "chat_template/chat_template.h"
#include "tokenizer/utf8.h"

namespace strata::server {
namespace {

using nlohmann::json;

// Reads an optional field of the expected kind; a wrong type is a 400 naming the field.
struct Fields {
  const json& body;
  std::optional<ApiError> error;

  const json* get(const char* name) const {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  }
  void wrong(const char* name, const char* expected) {
    if (!error) error = ApiError::bad_request(std::string("'") + name + "' must be " + expected, name);
  }
  template <typename T>
  void number(const char* name, T& out) {
    const json* v = get(name);
    if (v == nullptr) return;
    if (!v->is_number() || (std::is_integral_v<T> && !v->is_number_integer())) {
      wrong(name, std::is_integral_v<T> ? "an integer" : "a number");
      return;
    }
    out = v->get<T>();
  }
  void boolean(const char* name, bool& out) {
    const json* v = get(name);
    if (v == nullptr) return;
    if (!v->is_boolean()) return wrong(name, "a boolean");
    out = v->get<bool>();
  }
  void string(const char* name, std::string& out) {
    const json* v = get(name);
    if (v == nullptr) return;
    if (!v->is_string()) return wrong(name, "a string");
    out = v->get<std::string>();
  }
};

bool is_token_list(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& t : v) {
    if (!t.is_number_integer()) return false;
  }
  return true;
}

std::optional<ApiError> read_prompts(const json& prompt, const ServedModel& model,
                                     std::vector<std::vector<int32_t>>& out,
                                     std::vector<std::string>& texts) {
  auto encode = [&](const json& text) -> std::optional<ApiError> {
    if (model.tokenizer == nullptr) {
      return ApiError::bad_request("this model has no tokenizer: send token ids", "prompt");
    }
    const std::string& s = text.get_ref<const std::string&>();
    // "" would still encode to a BOS token; an empty prompt is an error, as vLLM's is.
    if (s.empty()) return ApiError::bad_request("the prompt is empty", "prompt");
    out.push_back(model.tokenizer->encode(s, /*add_special_tokens=*/true));
    texts.resize(out.size() - 1);
    texts.push_back(s);
    if (out.back().empty()) return ApiError::bad_request("the prompt is empty", "prompt");
    return std::nullopt;
  };
  if (prompt.is_string()) return encode(prompt);
  if (is_token_list(prompt)) {
    out.push_back(prompt.get<std::vector<int32_t>>());
    return std::nullopt;
  }
  if (prompt.is_array() && !prompt.empty()) {
    for (const json& p : prompt) {
      if (p.is_string()) {
        if (auto e = encode(p)) return e;
      } else if (is_token_list(p)) {
        out.push_back(p.get<std::vector<int32_t>>());
      } else {
        return ApiError::bad_request(
            "'prompt' must be a string, a list of strings, a list of token ids or a list of "
            "token-id lists",
            "prompt");
      }
    }
    return std::nullopt;
  }
  return ApiError::bad_request(
      "'prompt' must be a non-empty string, list of strings, token ids or list of token-id lists",
      "prompt");
}

// Chat: the messages rendered with the model's chat template, then encoded as the template
// wrote them (its special tokens are in the text).
std::optional<ApiError> render_messages(const json& body, const ServedModel& model,
                                        std::vector<std::vector<int32_t>>& out) {
  const auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return ApiError::bad_request("'messages' must be a non-empty list", "messages");
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const json& m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return ApiError::bad_request("each message needs a string 'role'", "messages");
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer") {
      return ApiError::bad_request("unknown message role '" + role + "'", "messages");
    }
    std::string content;
    const json c = m.value("content", json(nullptr));
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {
      for (const json& part : c) {  // text parts only
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return ApiError::bad_request("message content parts must be {type: text, text}",
                                       "messages");
        }
        content += part["text"].get<std::string>();
      }
    } else if (!c.is_null()) {
      return ApiError::bad_request("message content must be a string or a list of text parts",
                                   "messages");
    }
    nlohmann::ordered_json msg = {{"role", role}, {"content", content}};
    // What templates read besides role and content: a tool result's call id and name, an
    // assistant turn's tool calls.
    for (const char* key : {"name", "tool_call_id"}) {
      if (m.contains(key) && m[key].is_string()) msg[key] = m[key].get<std::string>();
    }
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      msg["tool_calls"] = nlohmann::ordered_json::parse(m["tool_calls"].dump());
    }
    messages.push_back(std::move(msg));
  }
  if (model.tokenizer == nullptr) return ApiError::bad_request("this model has no tokenizer");
  nlohmann::ordered_json options = {{"add_generation_prompt", body.value("add_generation_prompt", true)}};
  if (const auto kw = body.find("chat_template_kwargs"); kw != body.end() && kw->is_object()) {
    for (const auto& [k, v] : kw->items()) options[k] = v;
  }
  Result<std::string> text =
      chat_template::render_tokenizer_chat_template(*model.tokenizer, messages, options);
  if (!text.ok()) {
    return ApiError::bad_request("the chat template failed: " + text.status().message(),
                                 "messages");
  }
  out.push_back(model.tokenizer->encode(*text, /*add_special_tokens=*/false));
  if (out.back().empty()) return ApiError::bad_request("the rendered prompt is empty", "messages");
  return std::nullopt;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   const ServedModel& model) {
  return parse_request(body, model, /*chat=*/false);
}

std::variant<CompletionRequest, ApiError> parse_chat_request(std::string_view body,
                                                             const ServedModel& model) {
  return parse_request(body, model, /*chat=*/true);
}

std::variant<CompletionRequest, ApiError> parse_request(std::string_view body,
                                                        const ServedModel& model, bool chat) {
  if (!tokenizer::is_valid_utf8(body)) {
    return ApiError::bad_request("the request body is not valid UTF-8");
  }
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ApiError::bad_request("the request body is not valid JSON");
  if (!j.is_object()) return ApiError::bad_request("the request body must be a JSON object");
  Fields f{j, std::nullopt};
  CompletionRequest r;
  std::string name;
  f.string("model", name);
  if (!name.empty() && name != model.name) {
    return ApiError{404, "not_found_error", "the model '" + name + "' does not exist", "model",
                    "model_not_found"};
  }
  r.chat = chat;
  const json* prompt = chat ? nullptr : f.get("prompt");
  if (!chat && prompt == nullptr) return ApiError::bad_request("'prompt' is required", "prompt");
  engine::SamplingParams& p = r.params;
  f.number("max_tokens", p.max_tokens);
  if (chat) f.number("max_completion_tokens", p.max_tokens);
  f.number("temperature", p.temperature);
  f.number("top_p", p.top_p);
  f.number("top_k", p.top_k);
  f.number("min_p", p.min_p);
  f.number("presence_penalty", p.presence_penalty);
  f.number("frequency_penalty", p.frequency_penalty);
  f.number("repetition_penalty", p.repetition_penalty);
  f.number("n", r.n);
  f.boolean("stream", r.stream);
  if (!chat) f.boolean("echo", r.echo);
  f.boolean("ignore_eos", p.ignore_eos);
  f.boolean("return_tokens_as_token_ids", r.return_tokens_as_token_ids);
  f.boolean("return_token_ids", r.return_token_ids);
  f.string("cache_salt", r.cache_salt);
  f.string("user", r.user);
  if (const json* seed = f.get("seed")) {
    if (!seed->is_number_integer()) {
      f.wrong("seed", "an integer");
    } else {
      p.seed = static_cast<uint64_t>(seed->get<int64_t>());
    }
  }
  if (chat) {  // logprobs: bool, top_logprobs: 0..20
    bool want = false;
    f.boolean("logprobs", want);
    int32_t top = 0;
    f.number("top_logprobs", top);
    if (top < 0 || top > engine::SamplingParams::kMaxLogprobs) {
      return ApiError::bad_request("'top_logprobs' must be in [0, 20]", "top_logprobs");
    }
    if (want) p.logprobs = top;
  } else if (const json* lp = f.get("logprobs")) {
    if (!lp->is_number_integer()) {
      f.wrong("logprobs", "an integer");
    } else {
      p.logprobs = lp->get<int32_t>();
      if (p.logprobs < 0 || p.logprobs > engine::SamplingParams::kMaxLogprobs) {
        return ApiError::bad_request("'logprobs' must be in [0, 20]", "logprobs");
      }
    }
  }
  if (const json* stop = f.get("stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4 &&
               std::all_of(stop->begin(), stop->end(), [](const json& s) { return s.is_string(); })) {
      r.stop = stop->get<std::vector<std::string>>();
    } else {
      f.wrong("stop", "a string or a list of at most 4 strings");
    }
    for (const std::string& s : r.stop) {
      if (s.empty()) return ApiError::bad_request("stop strings must not be empty", "stop");
    }
  }
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) {
      f.wrong("stream_options", "an object");
    } else if (so->contains("include_usage")) {
      if (!(*so)["include_usage"].is_boolean()) {
        f.wrong("stream_options", "an object with a boolean include_usage");
      } else {
        r.include_usage = (*so)["include_usage"].get<bool>();
      }
    }
  }
  if (f.error) return *f.error;
  if (r.n < 1 || r.n > model.max_n) {
    return ApiError::bad_request("'n' must be in [1, " + std::to_string(model.max_n) + "]", "n");
  }
  if (r.echo) p.prompt_logprobs = std::max(p.logprobs, 0);
  if (Status s = p.validate(model.vocab_size); !s.ok()) {
    // Its messages read "FIELD must be ...": name the field, as the type checks above do.
    const std::string& m = s.message();
    const size_t at = m.find(" must be ");
    std::optional<std::string> param;
    if (at != std::string::npos && m.find(' ') == at) param = m.substr(0, at);
    return ApiError::bad_request(m, param);
  }
  if (auto e = chat ? render_messages(j, model, r.prompts)
                    : read_prompts(*prompt, model, r.prompts, r.prompt_texts)) {
    return *e;
  }
  r.prompt_texts.resize(r.prompts.size());
  for (const auto& ids : r.prompts) {
    for (const int32_t id : ids) {
      if (id < 0 || id >= model.vocab_size) {
        return ApiError::bad_request("token id " + std::to_string(id) + " is outside the vocabulary",
                                     "prompt");
      }
    }
    const int64_t total = static_cast<int64_t>(ids.size()) + p.max_tokens;
    if (total > model.max_model_len) {
      return ApiError::bad_request(
          "this model's maximum context length is " + std::to_string(model.max_model_len) +
              " tokens; the prompt has " + std::to_string(ids.size()) + " and max_tokens asks for " +
              std::to_string(p.max_tokens),
          "max_tokens", "context_length_exceeded");
    }
  }
  return r;
}

}  // namespace strata::server

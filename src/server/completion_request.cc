#include "server/completion_request.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

#include "chat_template/chat_prompt.h"
#include "core/json_input.h"
#include "core/quote.h"
#include "server/request_json.h"
#include "server/structured_output_request.h"
#include "server/tool_request.h"

namespace strata::server {
namespace {

using nlohmann::json;

// Whether an integer JSON value is within T's range (nlohmann keeps non-negative integers as
// uint64, negative ones as int64).
template <typename T>
bool fits(const json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  const int64_t x = v.get<int64_t>();
  return x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         (std::numeric_limits<T>::max() > std::numeric_limits<int64_t>::max() ||
          x <= static_cast<int64_t>(std::numeric_limits<T>::max()));
}

// Reads an optional field of the expected kind; a wrong type is a 400 naming the field.
struct Fields {
  const json& body;
  std::optional<ApiError> error;

  const json* get(const char* name) const {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  }
  void wrong(const char* name, const std::string& expected) {
    if (!error)
      error = ApiError::bad_request(std::string("'") + name + "' must be " + expected, name);
  }
  // Integers must fit T (get<T> would wrap 2^32 + 4 to 4); numbers must be finite as floats.
  template <typename T>
  void number(const char* name, T& out) {
    const json* v = get(name);
    if (v == nullptr) return;
    if constexpr (std::is_integral_v<T>) {
      if (!v->is_number_integer()) return wrong(name, "an integer");
      if (!fits<T>(*v)) {
        return wrong(name, ("an integer in [" + std::to_string(std::numeric_limits<T>::min()) +
                            ", " + std::to_string(std::numeric_limits<T>::max()) + "]")
                               .c_str());
      }
    } else {
      if (!v->is_number()) return wrong(name, "a number");
      if (!std::isfinite(static_cast<T>(v->get<double>()))) return wrong(name, "a finite number");
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

// A token-id prompt; every id must be in [0, vocab_size) as sent, not after a cast.
std::optional<ApiError> read_token_ids(const json& list, const ServedModel& model,
                                       std::vector<std::vector<int32_t>>& out) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const json& t : list) {
    if (!fits<int32_t>(t) || t.get<int64_t>() < 0 || t.get<int64_t>() >= model.vocab_size) {
      return ApiError::bad_request("token id " + safe_dump(t) + " is outside the vocabulary",
                                   "prompt");
    }
    ids.push_back(t.get<int32_t>());
  }
  out.push_back(std::move(ids));
  return std::nullopt;
}

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
    const auto& s = text.get_ref<const std::string&>();
    // "" would still encode to a BOS token; an empty prompt is an error, as vLLM's is.
    if (s.empty()) return ApiError::bad_request("the prompt is empty", "prompt");
    out.push_back(model.tokenizer->encode(s, /*add_special_tokens=*/true));
    texts.resize(out.size() - 1);
    texts.push_back(s);
    if (out.back().empty()) return ApiError::bad_request("the prompt is empty", "prompt");
    return std::nullopt;
  };
  if (prompt.is_string()) return encode(prompt);
  if (is_token_list(prompt)) return read_token_ids(prompt, model, out);
  if (prompt.is_array() && !prompt.empty()) {
    for (const json& p : prompt) {
      if (p.is_string()) {
        if (auto e = encode(p)) return e;
      } else if (is_token_list(p)) {
        if (auto e = read_token_ids(p, model, out)) return e;
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

// One chat message as the template sees it: role, content (text parts joined), and what
// templates read besides (a tool result's call id and name, an assistant turn's tool calls).
std::variant<nlohmann::ordered_json, ApiError> read_message(const json& m) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    return ApiError::bad_request("each message needs a string 'role'", "messages");
  }
  const std::string role = m["role"].get<std::string>();
  if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
      role != "developer") {
    return ApiError::bad_request("unknown message role '" + role + "'", "messages");
  }
  std::string content;
  const auto c = m.find("content");
  if (c == m.end() || c->is_null()) {
  } else if (c->is_string()) {
    content = c->get<std::string>();
  } else if (c->is_array()) {
    for (const json& part : *c) {  // text parts only
      const auto type = part.is_object() ? part.find("type") : part.end();
      const auto text = part.is_object() ? part.find("text") : part.end();
      if (!part.is_object() || type == part.end() || *type != "text" || text == part.end() ||
          !text->is_string()) {
        return ApiError::bad_request("message content parts must be {type: text, text}",
                                     "messages");
      }
      content += text->get<std::string>();
    }
  } else {
    return ApiError::bad_request("message content must be a string or a list of text parts",
                                 "messages");
  }
  nlohmann::ordered_json msg = {{"role", role}, {"content", std::move(content)}};
  for (const char* key : {"name", "tool_call_id"}) {
    if (const auto v = m.find(key); v != m.end() && v->is_string())
      msg[key] = v->get<std::string>();
  }
  if (const auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
    // Nesting is bounded by parse_request_json, so the round trip's recursion is too.
    msg["tool_calls"] = nlohmann::ordered_json::parse(safe_dump(*calls));
    // OpenAI sends a call's arguments as JSON text; templates write them with tojson, so they
    // get the object (as transformers and vLLM pass it), parsed under the request's nesting
    // bound like the body (the template recurses over it). Other text stays text.
    for (auto& call : msg["tool_calls"]) {
      auto* fn = call.is_object() && call.contains("function") && call["function"].is_object()
                     ? &call["function"]
                     : nullptr;
      if (fn == nullptr || !fn->contains("arguments") || !(*fn)["arguments"].is_string()) continue;
      auto parsed = parse_ordered_json_input((*fn)["arguments"].get_ref<const std::string&>(),
                                             kMaxRequestJsonDepth);
      auto* object = std::get_if<nlohmann::ordered_json>(&parsed);
      if (object != nullptr && object->is_object()) (*fn)["arguments"] = std::move(*object);
    }
  }
  return msg;
}

// What the template gets besides messages: add_generation_prompt and chat_template_kwargs. A
// kwarg may not replace a variable the server sets (messages would skip the checks above).
std::variant<nlohmann::ordered_json, ApiError> template_options(
    const json& body, const nlohmann::ordered_json& tools) {
  nlohmann::ordered_json options = {{"add_generation_prompt", true}};
  if (!tools.empty()) options["tools"] = tools;
  if (const auto g = body.find("add_generation_prompt"); g != body.end() && !g->is_null()) {
    if (!g->is_boolean()) {
      return ApiError::bad_request("'add_generation_prompt' must be a boolean",
                                   "add_generation_prompt");
    }
    options["add_generation_prompt"] = g->get<bool>();
  }
  const auto kw = body.find("chat_template_kwargs");
  if (kw == body.end() || kw->is_null()) return options;
  if (!kw->is_object()) {
    return ApiError::bad_request("'chat_template_kwargs' must be an object",
                                 "chat_template_kwargs");
  }
  for (const auto& [k, v] : kw->items()) {
    if (chat_template::is_reserved_template_variable(k)) {
      return ApiError::bad_request(
          "'chat_template_kwargs' may not set '" + k + "', which the server sets",
          "chat_template_kwargs");
    }
    options[k] = nlohmann::ordered_json::parse(safe_dump(v));
  }
  return options;
}

// Chat: the messages rendered with the model's chat template and encoded, the template's special
// tokens as special tokens, the request's text as plain text (unless the model says otherwise).
std::optional<ApiError> render_messages(const json& body, const ServedModel& model,
                                        const nlohmann::ordered_json& tools,
                                        std::vector<std::vector<int32_t>>& out) {
  const auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return ApiError::bad_request("'messages' must be a non-empty list", "messages");
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const json& m : *it) {
    auto msg = read_message(m);
    if (auto* e = std::get_if<ApiError>(&msg)) return std::move(*e);
    messages.push_back(std::move(std::get<nlohmann::ordered_json>(msg)));
  }
  auto options = template_options(body, tools);
  if (auto* e = std::get_if<ApiError>(&options)) return std::move(*e);
  if (model.tokenizer == nullptr) return ApiError::bad_request("this model has no tokenizer");
  chat_template::ChatPromptConfig config;
  config.special_tokens_in_content = model.special_tokens_in_content;
  Result<std::vector<int32_t>> ids = chat_template::encode_chat_prompt(
      *model.tokenizer, messages, std::get<nlohmann::ordered_json>(options), config);
  if (!ids.ok()) {
    return ApiError::bad_request("the chat template failed: " + ids.status().message(), "messages");
  }
  out.push_back(std::move(*ids));
  if (out.back().empty()) return ApiError::bad_request("the rendered prompt is empty", "messages");
  return std::nullopt;
}

// The body's fields the endpoint reads (and kStructuredOutputFields); any other is refused by
// name (unsupported_field), so a client asking for something the server does not do (tools on
// completions, logit_bias, vLLM's guided_whitespace_pattern in extra_body) gets an error instead
// of free text it then fails to parse.
constexpr std::array<std::string_view, 21> kReadFields = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "n", "stream", "stream_options", "ignore_eos",
    "return_tokens_as_token_ids", "return_token_ids", "cache_salt", "user", "seed", "stop",
    "logprobs", "kv_eviction"};
constexpr std::array<std::string_view, 2> kCompletionFields = {"prompt", "echo"};
constexpr std::array<std::string_view, 5> kChatFields = {"messages", "max_completion_tokens",
                                                         "top_logprobs", "add_generation_prompt",
                                                         "chat_template_kwargs"};

// Fields OpenAI clients may send at the value that asks for nothing, which is what this server
// does where it does not read them: no tools on /v1/completions, no legacy functions, no bias,
// nothing stored.
bool asks_for_nothing(std::string_view name, const json& v) {
  if (name == "tools" || name == "functions") return v.is_array() && v.empty();
  if (name == "tool_choice") return v == "none";
  if (name == "logit_bias") return v.is_object() && v.empty();
  if (name == "parallel_tool_calls") return v.is_boolean();  // about tools, where there are none
  if (name == "store") return v == false;
  return false;
}

bool endpoint_reads(std::string_view key, bool chat) {
  const auto in = [key](std::span<const std::string_view> names) {
    return std::find(names.begin(), names.end(), key) != names.end();
  };
  return in(kReadFields) || in(kStructuredOutputFields) ||
         (chat ? in(kChatFields) || in(kToolFields) : in(kCompletionFields));
}

std::optional<ApiError> unsupported_field(const json& body, bool chat) {
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || endpoint_reads(key, chat) || asks_for_nothing(key, value)) continue;
    const bool known = key == "tools" || key == "tool_choice" || key == "functions" ||
                       key == "function_call" || key == "logit_bias" || key.starts_with("guided_");
    std::optional<std::string> param;
    if (key.size() <= 64) param = key;
    return ApiError::bad_request(
        quote(key, 64) + " is not supported by this server" +
            (known ? " (tools on completions, legacy functions, logit bias and guided_* options "
                     "other than guided_json, guided_regex, guided_choice, guided_grammar and "
                     "guided_decoding_backend are not implemented)"
                   : ""),
        param);
  }
  return std::nullopt;
}

// "kv_eviction": an object of policy (a name), budget_tokens, sink_tokens and window_tokens
// (integers), and SnapKV's selection and pooling (names) and pool_kernel (an integer); another
// key, a wrong type or a value out of range is a 400 naming the field.
std::optional<ApiError> read_kv_eviction(const json& v, std::optional<KvEvictionParams>& out) {
  const auto bad = [](const std::string& what) {
    return ApiError::bad_request("'kv_eviction' " + what, "kv_eviction");
  };
  if (!v.is_object()) return bad("must be an object");
  KvEvictionParams p;
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    if (key == "policy") {
      const std::optional<KvEvictionPolicy> policy =
          value.is_string() ? parse_kv_eviction_policy(value.get_ref<const std::string&>())
                            : std::nullopt;
      if (!policy) {
        return bad(
            R"(policy must be one of "none", "streaming_llm", "paged_eviction", "h2o", "snapkv")");
      }
      p.policy = policy;
      continue;
    }
    if (key == "selection") {
      p.selection = value.is_string()
                        ? parse_kv_eviction_selection(value.get_ref<const std::string&>())
                        : std::nullopt;
      if (!p.selection) return bad(R"(selection must be "per_head" or "shared")");
      continue;
    }
    if (key == "pooling") {
      p.pooling = value.is_string() ? parse_kv_eviction_pooling(value.get_ref<const std::string&>())
                                    : std::nullopt;
      if (!p.pooling) return bad(R"(pooling must be "max" or "avg")");
      continue;
    }
    int32_t* field = key == "budget_tokens"   ? &p.budget_tokens
                     : key == "sink_tokens"   ? &p.sink_tokens
                     : key == "window_tokens" ? &p.window_tokens
                     : key == "pool_kernel"   ? &p.pool_kernel
                                              : nullptr;
    if (field == nullptr) {
      return bad("has no field " + quote(key, 64) +
                 " (policy, budget_tokens, sink_tokens, window_tokens, selection, pooling, "
                 "pool_kernel)");
    }
    if (!value.is_number_integer() || !fits<int32_t>(value) || value.get<int64_t>() < 0) {
      return bad(key + " must be a non-negative integer");
    }
    *field = value.get<int32_t>();
    if (key == "budget_tokens" && *field == 0) return bad("budget_tokens must be at least 1");
  }
  if (const Status s = validate_kv_eviction(p); !s.ok()) return bad(s.message());
  out = p;
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

namespace {

std::variant<CompletionRequest, ApiError> parse_checked_request(std::string_view body,
                                                                const ServedModel& model,
                                                                bool chat) {
  std::variant<json, ApiError> parsed = parse_request_json(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return std::move(*e);
  const json& j = std::get<json>(parsed);
  if (!j.is_object()) return ApiError::bad_request("the request body must be a JSON object");
  if (auto e = unsupported_field(j, chat)) return *e;
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
  SamplingParams& p = r.params;
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
    if (!seed->is_number_integer() || !fits<int64_t>(*seed)) {
      f.wrong("seed", "a 64-bit signed integer");  // as vLLM's
    } else {
      p.seed = static_cast<uint64_t>(seed->get<int64_t>());
    }
  }
  if (chat) {  // logprobs: bool, top_logprobs: 0..20
    bool want = false;
    f.boolean("logprobs", want);
    int32_t top = 0;
    f.number("top_logprobs", top);
    if (top < 0 || top > SamplingParams::kMaxLogprobs) {
      return ApiError::bad_request("'top_logprobs' must be in [0, 20]", "top_logprobs");
    }
    if (want) p.logprobs = top;
  } else if (f.get("logprobs") != nullptr) {
    p.logprobs = 0;
    f.number("logprobs", p.logprobs);
    if (p.logprobs < 0 || p.logprobs > SamplingParams::kMaxLogprobs) {
      return ApiError::bad_request("'logprobs' must be in [0, 20]", "logprobs");
    }
  }
  if (const json* stop = f.get("stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4 &&
               std::all_of(stop->begin(), stop->end(),
                           [](const json& s) { return s.is_string(); })) {
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
  if (const json* e = f.get("kv_eviction")) {
    if (auto err = read_kv_eviction(*e, r.kv_eviction)) return *err;
  }
  StructuredOutputRequest structured;
  if (auto e = read_structured_output(j, body, structured)) return *e;
  p.structured = std::move(structured.constraint);
  r.structured_field = std::move(structured.field);
  ToolRequest tools;
  if (chat) {
    if (auto e = read_tools(j, body, model.tool_call_format, tools)) return *e;
    r.tool_call_format = tools.parse;
    if (tools.constraint.active()) {
      if (p.structured.active()) {
        return ApiError::bad_request("tool_choice forces a tool call, which '" +
                                         r.structured_field + "' also constrains; send one",
                                     "tool_choice");
      }
      p.structured = std::move(tools.constraint);
      r.structured_field = "tool_choice";
    }
  }
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
  if (auto e = chat ? render_messages(j, model, tools.tools, r.prompts)
                    : read_prompts(*prompt, model, r.prompts, r.prompt_texts)) {
    return *e;
  }
  r.prompt_texts.resize(r.prompts.size());
  // Chat without max_tokens / max_completion_tokens: the room the context leaves (OpenAI's and
  // vLLM's default), not completions' 16, which would cut every structured output short.
  if (chat && f.get("max_tokens") == nullptr && f.get("max_completion_tokens") == nullptr) {
    p.max_tokens = static_cast<int32_t>(
        std::clamp<int64_t>(model.max_model_len - static_cast<int64_t>(r.prompts.front().size()), 1,
                            std::numeric_limits<int32_t>::max()));
  }
  const bool evicts = r.kv_eviction && r.kv_eviction->policy
                          ? *r.kv_eviction->policy != KvEvictionPolicy::kNone
                          : model.evicts_by_default;
  const int64_t max_len =
      evicts ? std::max(model.max_model_len, model.max_evicting_len) : model.max_model_len;
  for (const auto& ids : r.prompts) {
    for (const int32_t id : ids) {
      if (id < 0 || id >= model.vocab_size) {
        return ApiError::bad_request(
            "token id " + std::to_string(id) + " is outside the vocabulary", "prompt");
      }
    }
    const int64_t total = static_cast<int64_t>(ids.size()) + p.max_tokens;
    if (total > max_len) {
      return ApiError::bad_request("this model's maximum context length is " +
                                       std::to_string(max_len) + " tokens; the prompt has " +
                                       std::to_string(ids.size()) + " and max_tokens asks for " +
                                       std::to_string(p.max_tokens),
                                   "max_tokens", "context_length_exceeded");
    }
  }
  return r;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_request(std::string_view body,
                                                        const ServedModel& model, bool chat) {
  // Every field is type-checked before it is read; this is the backstop that keeps a missed
  // check a 400 rather than an exception escaping to the transport.
  try {
    return parse_checked_request(body, model, chat);
  } catch (const nlohmann::json::exception&) {
    return ApiError::bad_request("a field of the request body has the wrong type");
  }
}

}  // namespace strata::server

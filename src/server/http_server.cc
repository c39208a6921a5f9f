#include "server/http_server.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <set>
#include <variant>

#include "model/model.h"
#include "server/completion_output.h"

namespace strata::server {
namespace {

using nlohmann::json;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.to_json(), "application/json");
}

std::string completion_id(bool chat) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s-%016llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(rng()));
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
  return {{"tokens", l->tokens}, {"token_logprobs", lp}, {"top_logprobs", top},
          {"text_offset", l->text_offset}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (const unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
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

// One choice of a response (whole) or of a streamed chunk (a delta; `first`: the choice's first
// chunk, which carries the assistant role in chat).
json choice_json(const CompletionOutput::ChoiceDelta& c, bool chat, bool stream, bool first) {
  json out = {{"index", c.index},
              {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json(nullptr)}};
  if (!chat) {
    out["text"] = c.text;
    out["logprobs"] = logprobs_json(c.logprobs);
    return out;
  }
  out["logprobs"] = chat_logprobs_json(c.logprobs);
  if (!stream) {
    out["message"] = {{"role", "assistant"}, {"content", c.text}};
  } else {
    out["delta"] = json::object();
    if (first) out["delta"]["role"] = "assistant";
    if (!c.text.empty() || first) out["delta"]["content"] = c.text;
  }
  return out;
}

json usage_json(int64_t prompt, int64_t completion, int64_t cached) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// One submitted prompt of a completion request.
struct Running {
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<CompletionOutput> output;
  bool done = false;
  RequestMetrics metrics;  // as of its latest output
};

}  // namespace

HttpServer::HttpServer(AsyncEngine& engine, ServedModel model, ServerConfig config)
    : engine_(engine),
      model_(std::move(model)),
      config_(config),
      kv_bytes_per_token_(engine.engine().kv_bytes_per_token()),
      http_(std::make_unique<httplib::Server>()) {
  const int threads = config_.num_threads > 0 ? config_.num_threads
                                              : engine_.engine().config().max_num_seqs + 16;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(config_.max_body_bytes);
  routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() { http_->stop(); }

bool HttpServer::listen() {
  const int port = config_.port == 0 ? http_->bind_to_any_port(config_.host)
                                     : (http_->bind_to_port(config_.host, config_.port) ? config_.port : -1);
  if (port < 0) {
    std::fprintf(stderr, "strata: error: cannot listen on %s:%d\n", config_.host.c_str(),
                 config_.port);
    return false;
  }
  std::fprintf(stderr, "strata: serving %s on http://%s:%d\n", model_.name.c_str(),
               config_.host.c_str(), port);
  return serve();
}

bool HttpServer::serve() { return http_->listen_after_bind(); }

void HttpServer::routes() {
  http_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("", "text/plain");
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json models = {
        {"object", "list"},
        {"data",
         {{{"id", model_.name}, {"object", "model"}, {"created", std::time(nullptr)},
           {"owned_by", "strata"}, {"max_model_len", model_.max_model_len}}}}};
    res.set_content(models.dump(), "application/json");
  });
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    http_->Get(path, [](const httplib::Request& req, httplib::Response& res) {
      send_error(res, {405, "invalid_request_error", "use POST for " + req.path, {}, {}});
    });
  }
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completions(req, res, /*chat=*/false);
  });
  http_->Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) {
                completions(req, res, /*chat=*/true);
              });
  http_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    tokenize(req, res);
  });
  http_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    detokenize(req, res);
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.snapshot(), kv_bytes_per_token_),
                    "text/plain; version=0.0.4");
  });
  // Bearer auth on /v1/*, and the bound on requests in flight.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (!config_.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + config_.api_key) {
      send_error(res, {401, "authentication_error", "a valid API key is required", {}, "invalid_api_key"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (config_.max_waiting_requests > 0 && req.method == "POST" &&
        engine_.snapshot().num_unfinished >= config_.max_waiting_requests) {
      res.set_header("Retry-After", "1");
      send_error(res, {503, "service_unavailable", "the server is at capacity; retry later", {}, {}});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Routing and transport errors (unknown path, wrong method, oversize body) as OpenAI errors.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404:
        return send_error(res, {404, "not_found_error", "no route for " + req.path, {}, {}});
      case 405:
        return send_error(res, {405, "invalid_request_error",
                                req.method + " is not allowed on " + req.path, {}, {}});
      case 413:
        return send_error(res, {413, "invalid_request_error", "the request body is too large",
                                {}, {}});
      default:
        return send_error(res, {res.status, "invalid_request_error", "bad request", {}, {}});
    }
  });
}

void HttpServer::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::variant<CompletionRequest, ApiError> parsed = parse_request(req.body, model_, chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  auto request = std::make_shared<CompletionRequest>(std::move(std::get<CompletionRequest>(parsed)));
  auto running = std::make_shared<std::vector<Running>>();
  for (size_t i = 0; i < request->prompts.size(); ++i) {
    EngineRequest er;
    er.prompt = request->prompts[i];
    er.params = request->params;
    er.n = request->n;
    er.cache_salt = request->cache_salt;
    er.tenant = config_.api_key;  // each key is a tenant of the prefix cache
    Result<std::shared_ptr<RequestStream>> stream = engine_.submit(std::move(er));
    if (!stream.ok()) {
      for (Running& r : *running) engine_.cancel(r.stream->id());
      return send_error(res, ApiError::from_status(stream.status()));
    }
    Running r;
    r.stream = *stream;
    r.output = std::make_unique<CompletionOutput>(*request, model_, i);
    running->push_back(std::move(r));
  }
  const std::string id = completion_id(chat);
  const std::time_t created = std::time(nullptr);
  // Pulls what the engine produced into the outputs; cancels a prompt whose choices all hit
  // stop strings. Returns true while anything is unfinished.
  auto pump = [this, running](std::chrono::milliseconds wait) {
    bool any = false;
    for (Running& r : *running) {
      if (r.done) continue;
      std::vector<RequestOutput> outs;
      const bool more = r.stream->next(outs, wait);
      for (const RequestOutput& o : outs) {
        r.metrics = o.metrics;
        if (r.output->add(o) && more) engine_.cancel(r.stream->id());
      }
      r.done = !more;
      any = any || more;
    }
    return any;
  };
  auto usage = [running] {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (const Running& r : *running) {
      prompt += r.output->prompt_tokens();
      completion += r.output->completion_tokens();
      cached += r.output->cached_tokens();
    }
    return usage_json(prompt, completion, cached);
  };
  auto record = [this](const std::vector<Running>& finished) {
    for (const Running& r : finished) {
      const auto choices = r.output->choices();
      const std::string reason =
          choices.empty() || !choices[0].finish_reason ? "abort" : *choices[0].finish_reason;
      metrics_.record_finished(r.metrics, reason, r.output->completion_tokens());
    }
  };
  const char* object = !chat ? "text_completion"
                     : request->stream ? "chat.completion.chunk" : "chat.completion";
  auto chunk = [this, id, created, object](json choices) {
    return json{{"id", id}, {"object", object}, {"created", created},
                {"model", model_.name}, {"choices", std::move(choices)}};
  };
  if (!request->stream) {
    while (pump(std::chrono::milliseconds(100))) {
    }
    json choices = json::array();
    for (const Running& r : *running) {
      for (const auto& c : r.output->choices()) {
        choices.push_back(choice_json(c, chat, /*stream=*/false, /*first=*/true));
      }
    }
    json body = chunk(std::move(choices));
    body["usage"] = usage();
    record(*running);
    res.set_content(body.dump(), "application/json");
    return;
  }
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, request, running, pump, usage, chunk, record, chat](size_t,
                                                                 httplib::DataSink& sink) {
        auto send = [&sink](const std::string& data) {
          const std::string event = "data: " + data + "\n\n";
          return sink.write(event.data(), event.size());
        };
        bool more = true;
        std::set<int32_t> started;  // choices whose first chunk went out
        while (more) {
          more = pump(std::chrono::milliseconds(50));
          for (Running& r : *running) {
            for (const auto& c : r.output->take_deltas()) {
              const bool first = started.insert(c.index).second;
              if (!send(chunk(json::array({choice_json(c, chat, true, first)})).dump())) {
                more = false;
              }
            }
          }
          if (!sink.is_writable()) more = false;
        }
        bool all_done = true;
        for (Running& r : *running) {
          if (!r.done) {
            engine_.cancel(r.stream->id());  // the client went away
            all_done = false;
          }
        }
        if (all_done) {
          record(*running);
          if (request->include_usage) {
            json last = chunk(json::array());
            last["usage"] = usage();
            send(last.dump());
          }
          send("[DONE]");
        }
        sink.done();
        return true;
      });
}

void HttpServer::tokenize(const httplib::Request& req, httplib::Response& res) {
  const json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
    return send_error(res, ApiError::bad_request("'prompt' must be a string", "prompt"));
  }
  if (model_.tokenizer == nullptr) {
    return send_error(res, ApiError::bad_request("this model has no tokenizer"));
  }
  const bool special = j.value("add_special_tokens", true);
  const std::vector<int32_t> ids = model_.tokenizer->encode(j["prompt"].get<std::string>(), special);
  const json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model_.max_model_len}};
  res.set_content(out.dump(), "application/json");
}

void HttpServer::detokenize(const httplib::Request& req, httplib::Response& res) {
  const json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    return send_error(res, ApiError::bad_request("'tokens' must be a list of token ids", "tokens"));
  }
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model_.vocab_size) {
      return send_error(res, ApiError::bad_request("'tokens' holds an invalid token id", "tokens"));
    }
    ids.push_back(t.get<int32_t>());
  }
  if (model_.tokenizer == nullptr) {
    return send_error(res, ApiError::bad_request("this model has no tokenizer"));
  }
  res.set_content(json{{"prompt", model_.tokenizer->decode(ids, false)}}.dump(), "application/json");
}

}  // namespace strata::server

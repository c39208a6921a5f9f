// HttpServer's completion handlers: POST /v1/completions and /v1/chat/completions, plain and
// streaming (SSE). One CompletionCall per HTTP request; each of its prompts is one engine request.

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>
#include <set>
#include <variant>

#include "server/completion_output.h"
#include "server/http_server.h"
#include "server/response_json.h"

namespace strata::server {
namespace {

using nlohmann::json;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.to_json(), "application/json");
}

// One submitted prompt of a completion request.
struct Running {
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<CompletionOutput> output;
  bool done = false;
  RequestMetrics metrics;  // as of its latest output
};

}  // namespace

struct CompletionCall {
  CompletionRequest request;
  std::vector<Running> running;
  std::string id;
  std::time_t created = 0;

  // Pulls what the engine produced into the outputs; cancels a prompt whose choices all hit
  // stop strings. Returns true while anything is unfinished.
  bool pump(AsyncEngine& engine, std::chrono::milliseconds wait) {
    bool any = false;
    for (Running& r : running) {
      if (r.done) continue;
      std::vector<RequestOutput> outs;
      const bool more = r.stream->next(outs, wait);
      for (const RequestOutput& o : outs) {
        r.metrics = o.metrics;
        if (r.output->add(o) && more) engine.cancel(r.stream->id());
      }
      r.done = !more;
      any = any || more;
    }
    return any;
  }
  // Cancels the prompts still running (the client went away, or the response was never sent).
  void cancel_unfinished(AsyncEngine& engine) {
    for (Running& r : running) {
      if (!r.done) engine.cancel(r.stream->id());
    }
  }
  bool any_aborted() const {
    for (const Running& r : running) {
      for (const auto& c : r.output->choices()) {
        if (c.finish_reason == "abort") return true;
      }
    }
    return false;
  }
  json usage() const {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (const Running& r : running) {
      prompt += r.output->prompt_tokens();
      completion += r.output->completion_tokens();
      cached += r.output->cached_tokens();
    }
    return usage_json(prompt, completion, cached);
  }
  void record(Metrics& metrics) const {
    for (const Running& r : running) {
      const auto choices = r.output->choices();
      const std::string reason =
          choices.empty() || !choices[0].finish_reason ? "abort" : *choices[0].finish_reason;
      metrics.record_finished(r.metrics, reason, r.output->completion_tokens());
    }
  }
  json chunk(const std::string& model, json choices) const {
    const char* object = !request.chat    ? "text_completion"
                         : request.stream ? "chat.completion.chunk"
                                          : "chat.completion";
    return json{{"id", id},
                {"object", object},
                {"created", created},
                {"model", model},
                {"choices", std::move(choices)}};
  }
};

void HttpServer::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::variant<CompletionRequest, ApiError> parsed = parse_request(req.body, model_, chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  auto call = std::make_shared<CompletionCall>();
  call->request = std::move(std::get<CompletionRequest>(parsed));
  const CompletionRequest& request = call->request;
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    EngineRequest er;
    er.prompt = request.prompts[i];
    er.params = request.params;
    er.n = request.n;
    er.cache_salt = request.cache_salt;
    er.tenant = config_.api_key;  // each key is a tenant of the prefix cache
    Result<std::shared_ptr<RequestStream>> stream = engine_.submit(std::move(er));
    if (!stream.ok()) {
      call->cancel_unfinished(engine_);
      return send_error(res, ApiError::from_status(stream.status()));
    }
    Running r;
    r.stream = *stream;
    r.output = std::make_unique<CompletionOutput>(request, model_, i);
    call->running.push_back(std::move(r));
  }
  call->id = completion_id(chat);
  call->created = std::time(nullptr);
  if (request.stream) return streaming_completion(std::move(call), res);
  plain_completion(*call, res);
}

void HttpServer::plain_completion(CompletionCall& call, httplib::Response& res) {
  while (call.pump(engine_, std::chrono::milliseconds(100))) {
  }
  call.record(metrics_);
  if (call.any_aborted()) {
    // Cancelled by a shutdown's deadline (or an engine failure): no partial completion.
    return send_error(
        res,
        aborting_
            ? ApiError{503,
                       "service_unavailable",
                       "the server shut down before the request "
                       "finished",
                       {},
                       {}}
            : ApiError{
                  500, "internal_error", "the engine failed while running the request", {}, {}});
  }
  json choices = json::array();
  for (const Running& r : call.running) {
    for (const auto& c : r.output->choices()) {
      choices.push_back(choice_json(c, call.request.chat, /*stream=*/false, /*first=*/true));
    }
  }
  json body = call.chunk(model_.name, std::move(choices));
  body["usage"] = call.usage();
  res.set_content(body.dump(), "application/json");
}

// Server-sent events: a chunk per choice per engine step, a usage chunk when asked, [DONE]. The
// socket is checked every poll (50 ms) and after every write; a client that went away is
// cancelled. Requests cancelled by a shutdown end with finish_reason "abort" and [DONE].
void HttpServer::streaming_completion(std::shared_ptr<CompletionCall> call,
                                      httplib::Response& res) {
  auto provider = [this, call](size_t, httplib::DataSink& sink) {
    auto send = [&sink](const std::string& data) {
      const std::string event = "data: " + data + "\n\n";
      return sink.write(event.data(), event.size());
    };
    const bool chat = call->request.chat;
    bool more = true;
    std::set<int32_t> started;  // choices whose first chunk went out
    while (more) {
      more = call->pump(engine_, std::chrono::milliseconds(50));
      for (Running& r : call->running) {
        for (const auto& c : r.output->take_deltas()) {
          const bool first = started.insert(c.index).second;
          json choices = json::array({choice_json(c, chat, /*stream=*/true, first)});
          if (!send(call->chunk(model_.name, std::move(choices)).dump())) more = false;
        }
      }
      if (!sink.is_writable()) more = false;
    }
    bool all_done = true;
    for (const Running& r : call->running) all_done = all_done && r.done;
    if (!all_done) {
      call->cancel_unfinished(engine_);  // the client went away
    } else {
      call->record(metrics_);
      if (call->request.include_usage) {
        json last = call->chunk(model_.name, json::array());
        last["usage"] = call->usage();
        send(last.dump());
      }
      send("[DONE]");
    }
    sink.done();
    return true;
  };
  // cpp-httplib may never call the provider (the connection failed first): then nobody reads
  // the engine's requests, so they are cancelled rather than run to their end.
  auto release = [this, call](bool) { call->cancel_unfinished(engine_); };
  res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(release));
}

}  // namespace strata::server

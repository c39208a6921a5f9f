// HttpServer's completion handlers: POST /v1/completions and /v1/chat/completions, plain and
// streaming (SSE). One CompletionCall per HTTP request; each of its prompts is one engine request.

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <variant>

#include "server/completion_output.h"
#include "server/http_server.h"
#include "server/request_json.h"
#include "server/response_json.h"

namespace strata::server {
namespace {

using nlohmann::json;

// How often a waiting handler looks at its streams and its client.
constexpr auto kPlainPoll = std::chrono::milliseconds(100);
constexpr auto kStreamPoll = std::chrono::milliseconds(50);

ApiError unavailable_error(std::string message) {
  return {503, "service_unavailable", std::move(message), {}, {}};
}

}  // namespace

struct CompletionCall {
  // One submitted prompt of the request.
  struct Running {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<CompletionOutput> output;
    bool done = false;
    RequestMetrics metrics;  // as of its latest output
  };
  // Releases the call's admitted sequences however the handler ends.
  struct Admission {
    std::function<void()> release;
    ~Admission() {
      if (release) release();
    }
  };
  Admission admission;
  CompletionRequest request;
  std::vector<Running> running;
  std::string id;
  std::time_t created = 0;
  // --role decode: the call to the prefill instance, running beside the engine's read of the
  // blocks it computes, and what stops it. Declared last, so that it is waited for before the
  // rest goes; the destructor stops it first, so a handler that ends early (its client gone, an
  // error) waits for no prefill.
  std::shared_ptr<PrefillStop> prefill_stop;
  std::future<void> prefill;
  CompletionCall() = default;
  CompletionCall(const CompletionCall&) = delete;
  CompletionCall& operator=(const CompletionCall&) = delete;
  ~CompletionCall() {
    if (prefill_stop) prefill_stop->stop();
  }

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
    int64_t prompt = 0, completion = 0;
    CachedTokens cached;
    for (const Running& r : running) {
      prompt += r.output->prompt_tokens();
      completion += r.output->completion_tokens();
      cached.total += r.output->cached_tokens().total;
      cached.host_tier += r.output->cached_tokens().host_tier;
      cached.disk_tier += r.output->cached_tokens().disk_tier;
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

void HttpServer::completions(const HttpRequest& req, HttpResponder& res, bool chat) {
  std::variant<CompletionRequest, ApiError> parsed = parse_request(req.body, model_, chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  std::variant<const PrefillClient*, ApiError> prefill = prefill_for(req);
  if (auto* e = std::get_if<ApiError>(&prefill)) return send_error(res, *e);
  CompletionCall call;
  call.request = std::move(std::get<CompletionRequest>(parsed));
  const CompletionRequest& request = call.request;
  const int64_t sequences = static_cast<int64_t>(request.prompts.size()) * request.n;
  if (config_.max_waiting_requests > 0 && sequences > config_.max_waiting_requests) {
    return send_error(res, ApiError::bad_request(
                               "the request needs " + std::to_string(sequences) +
                                   " sequences (prompts x n); the server admits at most " +
                                   std::to_string(config_.max_waiting_requests) + " at once",
                               "n"));
  }
  if (!admit(sequences)) {
    return send_error(res, unavailable_error("the server is at capacity; retry later"),
                      {{"Retry-After", "1"}});
  }
  call.admission.release = [this, sequences] { release(sequences); };
  // An invalid schema or pattern is the request's error, found here, on the handler's thread:
  // the engine thread then finds the grammar compiled.
  if (request.params.structured.active()) {
    if (const Status s = engine_.engine().compile_structured_output(request.params.structured);
        !s.ok()) {
      return send_error(res, ApiError::bad_request(s.message(), request.structured_field));
    }
  }
  const std::string tenant_key = tenant(req).value_or("");
  // --role decode: the prefill instance computes the prompts while the requests wait in this
  // engine, whose read of their blocks starts now and takes each block as it is computed
  // (EngineRequest::remote_prefill_running), so the transfer overlaps the prefill.
  std::shared_ptr<std::atomic<bool>> prefilling;
  if (const PrefillClient* p = std::get<const PrefillClient*>(prefill)) {
    prefilling = std::make_shared<std::atomic<bool>>(true);
    call.prefill_stop = std::make_shared<PrefillStop>();
    call.prefill = std::async(std::launch::async, [this, p, prompts = request.prompts,
                                                   salt = request.cache_salt,
                                                   auth = std::string(req.header("Authorization")),
                                                   prefilling, stop = call.prefill_stop] {
      prefill_prompts(*p, prompts, salt, auth, *stop);
      prefilling->store(false, std::memory_order_release);
    });
  }
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    EngineRequest er;
    er.prompt = request.prompts[i];
    er.params = request.params;
    er.n = request.n;
    er.cache_salt = request.cache_salt;
    er.kv_eviction = request.kv_eviction;
    er.tenant = tenant_key;  // each key is a tenant of the prefix cache
    er.remote_prefill_running = prefilling;
    Result<std::shared_ptr<RequestStream>> stream = engine_.submit(std::move(er));
    if (!stream.ok()) {
      call.cancel_unfinished(engine_);
      return send_error(res, ApiError::from_status(stream.status()));
    }
    CompletionCall::Running r;
    r.stream = *stream;
    r.output = std::make_unique<CompletionOutput>(request, model_, i);
    call.running.push_back(std::move(r));
  }
  call.id = completion_id(chat);
  call.created = std::time(nullptr);
  if (request.stream) return streaming_completion(call, res);
  plain_completion(call, res);
}

std::variant<const PrefillClient*, ApiError> HttpServer::prefill_for(const HttpRequest& req) const {
  std::string_view named = req.header(kPrefillHeader);
  if (named.empty()) return prefill_.empty() ? nullptr : &prefill_.front();
  while (named.ends_with('/')) named.remove_suffix(1);
  for (const PrefillClient& p : prefill_) {
    if (p.url() == named) return &p;
  }
  // Only an instance the operator configured is ever called: a client cannot point the server
  // at an address of its choosing.
  return ApiError::bad_request(
      prefill_.empty() ? std::string(kPrefillHeader) + " is for a --role decode instance"
                       : std::string(kPrefillHeader) + " names no --prefill-url of this instance",
      std::string(kPrefillHeader));
}

void HttpServer::prefill_prompts(const PrefillClient& prefill,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const std::string& cache_salt, const std::string& authorization,
                                 PrefillStop& stop) {
  for (const std::vector<int32_t>& prompt : prompts) {
    const Status s = prefill.prefill(prompt, cache_salt, authorization, &stop);
    if (s.ok()) continue;
    if (stop.stopped()) return;  // the request ended first: not a failure of the instance
    // Computed here instead. Said on the first failure and every hundredth after.
    const int64_t n = prefill_failures_.fetch_add(1) + 1;
    if (n == 1 || n % 100 == 0) {
      std::fprintf(stderr, "strata: prefill failed (%lld so far; computed here): %s\n",
                   static_cast<long long>(n), s.message().c_str());
    }
  }
}

void HttpServer::plain_completion(CompletionCall& call, HttpResponder& res) {
  while (call.pump(engine_, kPlainPoll)) {
    if (res.client_gone()) {  // nobody will read the answer: free its sequences now
      call.cancel_unfinished(engine_);
      return res.abandon();
    }
  }
  call.record(metrics_);
  if (call.any_aborted()) {
    // Cancelled by a shutdown's deadline (or an engine failure): no partial completion.
    return send_error(
        res, aborting_ ? unavailable_error("the server shut down before the request finished")
                       : ApiError{500,
                                  "internal_error",
                                  "the engine failed while running the request",
                                  {},
                                  {}});
  }
  json choices = json::array();
  for (const CompletionCall::Running& r : call.running) {
    for (const auto& c : r.output->choices()) {
      choices.push_back(choice_json(c, call.request.chat, /*stream=*/false, /*first=*/true));
    }
  }
  json body = call.chunk(model_.name, std::move(choices));
  body["usage"] = call.usage();
  res.send(200, "application/json", safe_dump(body));
}

// Server-sent events: a chunk per choice per engine step, a usage chunk when asked, [DONE]. The
// client is checked every poll (50 ms) and after every write; a client that went away is
// cancelled. Requests cancelled by a shutdown end with finish_reason "abort" and [DONE].
void HttpServer::streaming_completion(CompletionCall& call, HttpResponder& res) {
  auto send = [&res](const std::string& data) { return res.write_chunk("data: " + data + "\n\n"); };
  const bool chat = call.request.chat;
  bool more = res.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  std::set<int32_t> started;  // choices whose first chunk went out
  while (more) {
    more = call.pump(engine_, kStreamPoll);
    for (CompletionCall::Running& r : call.running) {
      for (const auto& c : r.output->take_deltas()) {
        const bool first = started.insert(c.index).second;
        json choices = json::array({choice_json(c, chat, /*stream=*/true, first)});
        if (!send(safe_dump(call.chunk(model_.name, std::move(choices))))) more = false;
      }
    }
    if (res.client_gone()) more = false;
  }
  bool all_done = true;
  for (const CompletionCall::Running& r : call.running) all_done = all_done && r.done;
  if (!all_done) {
    call.cancel_unfinished(engine_);  // the client went away
    return res.abandon();
  }
  call.record(metrics_);
  if (call.request.include_usage) {
    json last = call.chunk(model_.name, json::array());
    last["usage"] = call.usage();
    send(safe_dump(last));
  }
  send("[DONE]");
  res.end_stream();
}

}  // namespace strata::server

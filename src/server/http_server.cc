#include "server/http_server.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>

#include "server/request_json.h"

namespace strata::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// After a shutdown's deadline cancels what runs, how long its responses get to end (a client
// that stopped reading holds a handler until the write timeout).
constexpr auto kAbortGrace = std::chrono::seconds(10);

HttpResponse error_response(const ApiError& e) {
  return {e.http_status, "application/json", e.to_json(), {}, false};
}

ApiError unavailable(std::string message) {
  return {503, "service_unavailable", std::move(message), {}, {}};
}

ApiError unauthorized() {
  return {401, "authentication_error", "a valid API key is required", {}, "invalid_api_key"};
}

// The method each path serves.
const char* route_method(std::string_view path) {
  if (path == "/health" || path == "/v1/models" || path == "/metrics") return "GET";
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" ||
      path == "/detokenize" || path == "/reset_prefix_cache") {
    return "POST";
  }
  return nullptr;
}

}  // namespace

void send_error(HttpResponder& res, const ApiError& e, const HttpHeaders& headers) {
  res.send(e.http_status, "application/json", e.to_json(), headers);
}

HttpServer::HttpServer(AsyncEngine& engine, ServedModel model, ServerConfig config)
    : engine_(engine),
      model_(std::move(model)),
      config_(std::move(config)),
      kv_facts_{engine.engine().kv_cache().bytes_per_token,
                engine.engine().kv_cache().scale_bytes_per_token,
                engine.engine().config().block_size} {
  for (const std::string& url : config_.prefill_urls) prefill_.emplace_back(url, config_.prefill_timeout);
  HttpLimits limits = config_.limits;
  if (limits.num_handler_threads <= 0) {
    limits.num_handler_threads = engine_.engine().config().max_num_seqs + 16;
  }
  http_ = std::make_unique<HttpTransport>(
      limits, [this](const HttpRequest& req, HttpResponder& res) { handle(req, res); },
      [this](const HttpRequest& req) { return quick(req); },
      [](int status, const std::string& message) {
        const char* type = status == 503 ? "service_unavailable" : "invalid_request_error";
        return error_response({status, type, message, {}, {}});
      });
}

HttpServer::~HttpServer() = default;

bool HttpServer::listen() {
  {
    std::lock_guard<std::mutex> lock(bind_mu_);
    if (draining_) return true;  // a signal came before we bound
    Result<int> port = http_->bind(config_.host, config_.port);
    if (!port.ok()) {
      std::fprintf(stderr, "strata: error: %s\n", port.status().message().c_str());
      return false;
    }
    bound_ = true;
    std::fprintf(stderr, "strata: serving %s on http://%s:%d\n", model_.name.c_str(),
                 config_.host.c_str(), *port);
  }
  http_->run();
  return true;
}

void HttpServer::shutdown(std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  {
    std::lock_guard<std::mutex> lock(bind_mu_);
    draining_ = true;
    if (!bound_) return;
  }
  http_->stop_accepting();
  HandlerPool& active = http_->handlers();
  std::fprintf(stderr, "strata: shutting down: %lld requests in flight, waiting up to %.3g s\n",
               static_cast<long long>(active.count()),
               std::chrono::duration<double>(timeout).count());
  if (!active.wait_idle(deadline)) {
    aborting_ = true;
    engine_.cancel_all();
    std::fprintf(stderr, "strata: cancelling %lld requests still in flight\n",
                 static_cast<long long>(active.count()));
    if (!active.wait_idle(Clock::now() + kAbortGrace, /*interruptible=*/false)) {
      std::fprintf(stderr, "strata: %lld responses did not end; closing their connections\n",
                   static_cast<long long>(active.count()));
    }
  }
  http_->stop();
}

void HttpServer::shutdown_now() { http_->handlers().cut_short(); }

std::optional<std::string> HttpServer::tenant(const HttpRequest& req) const {
  if (config_.api_keys.empty()) return std::string();
  const std::optional<std::string_view> key = req.bearer_key();
  if (!key) return std::nullopt;
  for (const std::string& k : config_.api_keys) {
    if (k == *key) return k;
  }
  return std::nullopt;
}

bool HttpServer::admit(int64_t sequences) {
  if (config_.max_waiting_requests <= 0) return true;
  int64_t now = admitted_.load();
  do {
    if (now + sequences > config_.max_waiting_requests) return false;
  } while (!admitted_.compare_exchange_weak(now, now + sequences));
  return true;
}

void HttpServer::release(int64_t sequences) {
  if (config_.max_waiting_requests > 0) admitted_ -= sequences;
}

std::optional<HttpResponse> HttpServer::quick(const HttpRequest& req) {
  const char* method = route_method(req.path);
  if (method == nullptr) {
    return error_response({404, "not_found_error", "no route for " + req.path, {}, {}});
  }
  if (req.method != method) {
    return error_response({405,
                           "invalid_request_error",
                           req.method + " is not allowed on " + req.path + "; use " + method,
                           {},
                           {}});
  }
  if (std::string_view(method) == "POST") return std::nullopt;  // a handler thread's work
  if (req.path == "/health") return HttpResponse{200, "text/plain", "", {}, false};
  if (req.path == "/metrics") {
    if (config_.metrics_require_key && !tenant(req)) return error_response(unauthorized());
    // The scrape itself is a request being handled, on the I/O thread.
    return HttpResponse{200, "text/plain; version=0.0.4",
                        metrics_.render(engine_.snapshot(), kv_facts_,
                                        http_->handlers().count() + 1, http_->stats()),
                        {},
                        false};
  }
  if (!tenant(req)) return error_response(unauthorized());
  const json models = {{"object", "list"},
                       {"data",
                        {{{"id", model_.name},
                          {"object", "model"},
                          {"created", std::time(nullptr)},
                          {"owned_by", "strata"},
                          {"max_model_len", model_.max_model_len}}}}};
  return HttpResponse{200, "application/json", safe_dump(models), {}, false};
}

void HttpServer::handle(const HttpRequest& req, HttpResponder& res) {
  if (draining_) {
    res.close_after();
    return send_error(res, unavailable("the server is shutting down"));
  }
  const std::optional<std::string> key = tenant(req);
  if (!key) return send_error(res, unauthorized());
  if (req.path == "/tokenize") return tokenize(req, res);
  if (req.path == "/detokenize") return detokenize(req, res);
  if (req.path == "/reset_prefix_cache") return reset_prefix_cache(req, res);
  completions(req, res, /*chat=*/req.path == "/v1/chat/completions");
}

void HttpServer::reset_prefix_cache(const HttpRequest& req, HttpResponder& res) {
  // vLLM's query parameters; what they would ask for beyond the pool is not done here. The body,
  // which vLLM does not read, is not read either.
  const size_t q = req.target.find('?');
  std::string_view query = q == std::string::npos ? std::string_view()
                                                  : std::string_view(req.target).substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    const std::string name(pair.substr(0, eq));
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (name != "reset_running_requests" && name != "reset_external") {
      return send_error(res, ApiError::bad_request("unknown query parameter '" + name + "'", name));
    }
    if (value == "false" || value == "0") continue;
    if (value == "true" || value == "1") {
      return send_error(
          res, ApiError::bad_request("'" + name + "=true' is not supported: the server resets the "
                                     "prefix cache only when no request is in flight, and its KV "
                                     "tiers keep their blocks",
                                     name));
    }
    return send_error(res, ApiError::bad_request("'" + name + "' must be true or false", name));
  }
  const Status s = engine_.reset_prefix_cache();
  if (!s.ok()) {
    const bool busy = s.code() == StatusCode::kUnavailable;
    return send_error(res, {busy ? 409 : 500, busy ? "conflict_error" : "server_error",
                            "the prefix cache was not reset: " + s.message(), {}, {}});
  }
  std::fprintf(stderr, "strata: the prefix cache was reset\n");
  res.send(200, "text/plain", "");
}

void HttpServer::tokenize(const HttpRequest& req, HttpResponder& res) {
  std::variant<json, ApiError> parsed = parse_request_json(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const json& j = std::get<json>(parsed);
  if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
    return send_error(res, ApiError::bad_request("'prompt' must be a string", "prompt"));
  }
  if (model_.tokenizer == nullptr) {
    return send_error(res, ApiError::bad_request("this model has no tokenizer"));
  }
  if (j.contains("add_special_tokens") && !j["add_special_tokens"].is_boolean()) {
    return send_error(
        res, ApiError::bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"));
  }
  const bool special = j.value("add_special_tokens", true);
  const std::vector<int32_t> ids =
      model_.tokenizer->encode(j["prompt"].get<std::string>(), special);
  const json out = {
      {"tokens", ids}, {"count", ids.size()}, {"max_model_len", model_.max_model_len}};
  res.send(200, "application/json", safe_dump(out));
}

void HttpServer::detokenize(const HttpRequest& req, HttpResponder& res) {
  std::variant<json, ApiError> parsed = parse_request_json(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const json& j = std::get<json>(parsed);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    return send_error(res, ApiError::bad_request("'tokens' must be a list of token ids", "tokens"));
  }
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    // Unsigned values above 2^63 are not integers to is_number_integer's int64 view: check both.
    if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() >= (1ull << 31)) ||
        t.get<int64_t>() < 0 || t.get<int64_t>() >= model_.vocab_size) {
      return send_error(res, ApiError::bad_request("'tokens' holds an invalid token id", "tokens"));
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (model_.tokenizer == nullptr) {
    return send_error(res, ApiError::bad_request("this model has no tokenizer"));
  }
  res.send(200, "application/json", safe_dump(json{{"prompt", model_.tokenizer->decode(ids, false)}}));
}

}  // namespace strata::server

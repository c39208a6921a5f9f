#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <mutex>

#include "server/connections.h"

namespace strata::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// After a shutdown's deadline cancels what runs, how long its responses get to end (a client
// that stopped reading holds a handler until cpp-httplib's write timeout, 5 s).
constexpr auto kAbortGrace = std::chrono::seconds(10);

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.to_json(), "application/json");
}

}  // namespace

// cpp-httplib's server with two things 0.11 does not offer: its listening socket (to stop
// accepting without stop(), after which a streamed response whose body has not begun would be
// sent with no body at all) and a real listen backlog (it listens with 5: a burst of hundreds of
// clients would have most SYNs dropped and retried a second later).
class Listener : public httplib::Server {
 public:
  int listening_socket() const { return svr_sock_; }
  std::mutex mu;  // orders bind against shutdown
};

HttpServer::HttpServer(AsyncEngine& engine, ServedModel model, ServerConfig config)
    : engine_(engine),
      model_(std::move(model)),
      config_(config),
      kv_facts_{engine.engine().kv_bytes_per_token(), engine.engine().kv_scale_bytes_per_token(),
                engine.engine().config().block_size, engine.engine().residual_bytes(),
                engine.engine().num_residual_blocks()},
      http_(std::make_unique<Listener>()) {
  // One thread per running sequence plus some for metrics, health and rejected requests.
  const int threads =
      config_.num_threads > 0 ? config_.num_threads : engine_.engine().config().max_num_seqs + 16;
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  http_->set_payload_max_length(config_.max_body_bytes);
  routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::listen() {
  {
    std::lock_guard<std::mutex> lock(http_->mu);
    if (draining_) return true;  // a signal came before we bound
    const int port = config_.port == 0 ? http_->bind_to_any_port(config_.host)
                     : http_->bind_to_port(config_.host, config_.port) ? config_.port
                                                                       : -1;
    if (port < 0) {
      std::fprintf(stderr, "strata: error: cannot listen on %s:%d\n", config_.host.c_str(),
                   config_.port);
      return false;
    }
    ::listen(http_->listening_socket(), SOMAXCONN);  // raises cpp-httplib's backlog of 5
    port_ = port;
    std::fprintf(stderr, "strata: serving %s on http://%s:%d\n", model_.name.c_str(),
                 config_.host.c_str(), port);
  }
  const bool ok = http_->listen_after_bind();
  // A shutdown ends the accept loop by shutting the listener down, which cpp-httplib reports as
  // a failure; it returns once every handler thread is done.
  return ok || draining_;
}

void HttpServer::shutdown(std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  {
    std::lock_guard<std::mutex> lock(http_->mu);
    draining_ = true;
    // accept() fails and the accept loop ends; connections already accepted keep being served.
    if (port_ >= 0) ::shutdown(http_->listening_socket(), SHUT_RD);
  }
  std::fprintf(stderr, "strata: shutting down: %lld requests in flight, waiting up to %.3g s\n",
               static_cast<long long>(active_.count()),
               std::chrono::duration<double>(timeout).count());
  if (!active_.wait_idle(deadline)) {
    aborting_ = true;
    engine_.cancel_all();
    std::fprintf(stderr, "strata: cancelling %lld requests still in flight\n",
                 static_cast<long long>(active_.count()));
    if (!active_.wait_idle(Clock::now() + kAbortGrace, /*interruptible=*/false)) {
      std::fprintf(stderr, "strata: %lld responses did not end; closing their connections\n",
                   static_cast<long long>(active_.count()));
    }
  }
  // No request in flight (or the grace is over): idle keep-alive connections go now.
  if (port_ >= 0) shutdown_connections_on_port(port_);
}

void HttpServer::shutdown_now() { active_.cut_short(); }

bool HttpServer::reject(const httplib::Request& req, httplib::Response& res) {
  const bool work = req.method == "POST" && req.path != "/metrics" && req.path != "/health";
  if (draining_ && work) {
    res.set_header("Connection", "close");
    send_error(res, {503, "service_unavailable", "the server is shutting down", {}, {}});
    return true;
  }
  if (req.path.rfind("/v1/", 0) != 0) return false;
  if (!config_.api_key.empty() &&
      req.get_header_value("Authorization") != "Bearer " + config_.api_key) {
    send_error(res,
               {401, "authentication_error", "a valid API key is required", {}, "invalid_api_key"});
    return true;
  }
  if (config_.max_waiting_requests > 0 && req.method == "POST" &&
      engine_.snapshot().num_unfinished >= config_.max_waiting_requests) {
    res.set_header("Retry-After", "1");
    send_error(res, {503, "service_unavailable", "the server is at capacity; retry later", {}, {}});
    return true;
  }
  return false;
}

void HttpServer::routes() {
  using Handler = httplib::Server::Handler;
  // Every method a path does not serve gets 405 (cpp-httplib would answer 404).
  auto only = [this](const char* path, const char* method, const Handler& handler) {
    const Handler not_allowed = [method](const httplib::Request& req, httplib::Response& res) {
      send_error(res, {405,
                       "invalid_request_error",
                       req.method + " is not allowed on " + req.path + "; use " + method,
                       {},
                       {}});
    };
    const bool get = std::string(method) == "GET";
    http_->Get(path, get ? handler : not_allowed);
    http_->Post(path, get ? not_allowed : handler);
    http_->Put(path, not_allowed);
    http_->Patch(path, not_allowed);
    http_->Delete(path, not_allowed);
  };
  only("/health", "GET",
       [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });
  only("/v1/models", "GET", [this](const httplib::Request&, httplib::Response& res) {
    const json models = {{"object", "list"},
                         {"data",
                          {{{"id", model_.name},
                            {"object", "model"},
                            {"created", std::time(nullptr)},
                            {"owned_by", "strata"},
                            {"max_model_len", model_.max_model_len}}}}};
    res.set_content(models.dump(), "application/json");
  });
  only("/metrics", "GET", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.snapshot(), kv_facts_, active_.count()),
                    "text/plain; version=0.0.4");
  });
  only("/v1/completions", "POST", [this](const httplib::Request& req, httplib::Response& res) {
    completions(req, res, /*chat=*/false);
  });
  only("/v1/chat/completions", "POST", [this](const httplib::Request& req, httplib::Response& res) {
    completions(req, res, /*chat=*/true);
  });
  only("/tokenize", "POST",
       [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
  only("/detokenize", "POST",
       [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
  // Every request that reaches routing is counted until its response is written (the logger
  // runs then, on the same thread), so a shutdown knows what is in flight.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    active_.begin();
    return reject(req, res) ? httplib::Server::HandlerResponse::Handled
                            : httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_logger([this](const httplib::Request&, const httplib::Response&) { active_.end(); });
  // Routing and transport errors (unknown path, oversize body) as OpenAI errors.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404:
        return send_error(res, {404, "not_found_error", "no route for " + req.path, {}, {}});
      case 405:
        return send_error(
            res,
            {405, "invalid_request_error", req.method + " is not allowed on " + req.path, {}, {}});
      case 413:
        return send_error(res,
                          {413, "invalid_request_error", "the request body is too large", {}, {}});
      default:
        return send_error(res, {res.status, "invalid_request_error", "bad request", {}, {}});
    }
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
  if (j.contains("add_special_tokens") && !j["add_special_tokens"].is_boolean()) {
    return send_error(
        res, ApiError::bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"));
  }
  const bool special = j.value("add_special_tokens", true);
  const std::vector<int32_t> ids =
      model_.tokenizer->encode(j["prompt"].get<std::string>(), special);
  const json out = {
      {"tokens", ids}, {"count", ids.size()}, {"max_model_len", model_.max_model_len}};
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
  res.set_content(json{{"prompt", model_.tokenizer->decode(ids, false)}}.dump(),
                  "application/json");
}

}  // namespace strata::server

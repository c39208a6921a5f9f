#pragma once
// HttpServer: Strata's OpenAI-compatible HTTP front, over an AsyncEngine.
//
//   POST /v1/completions   prompt(s) as text or token ids; streaming (SSE) or not; OpenAI errors
//   POST /v1/chat/completions   messages rendered with the model's chat template
//   GET  /v1/models        the served model
//   GET  /health           200 while serving
//   GET  /metrics          Prometheus text, vLLM-style names under strata:
//   POST /tokenize, /detokenize   the model's tokenizer
//
// The transport (HttpTransport) reads each request whole, without a thread, under the limits of
// ServerConfig::limits; health, models and metrics are answered on its I/O thread, the rest on
// handler threads that parse and validate, submit to the engine thread, and wait on their
// request's stream. A client that goes away (streaming or not) is cancelled within one poll
// (50 ms streaming, 100 ms otherwise). Every bad request gets an OpenAI error object and leaves
// the others alone; no handler's exception escapes its thread.
//
// Admission: with max_waiting_requests, the sequences a request adds (prompts x n) are counted
// against it atomically at admission and released when the request ends.
//
// Shutdown (SIGTERM): shutdown() closes the listening socket, so new connections are refused,
// and answers new requests on open keep-alive connections with 503; requests in flight run to
// their end for up to the timeout, then are cancelled: their streams end with a last chunk whose
// finish_reason is "abort" and [DONE], plain requests get a 503 error. listen() returns once
// every response has been written.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/async_engine.h"
#include "server/completion_request.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/prefill_client.h"

namespace strata::server {

struct CompletionCall;  // one completion request being served (completion_handler.cc)

// Sends `e` as the OpenAI error object with its HTTP status (and `headers`).
void send_error(HttpResponder& res, const ApiError& e, const HttpHeaders& headers = {});

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  // num_handler_threads 0 = max_num_seqs + 16: every running sequence can hold a handler.
  HttpLimits limits{.num_handler_threads = 0};
  // Bearer keys, any of which is required on /v1/*, /tokenize and /detokenize (401 otherwise);
  // empty = open. Each key's requests are a tenant of the prefix cache: the engine salts them
  // apart.
  std::vector<std::string> api_keys;
  bool metrics_require_key = false;  // /metrics too needs a key
  // Sequences (prompts x n) admitted but not finished beyond which new requests get 503 +
  // Retry-After; 0 = no bound.
  int64_t max_waiting_requests = 0;
  // --role decode: the prefill instances (http://HOST:PORT) a prompt may be sent to first --
  // the one a request's X-Strata-Prefill-Url header names, exactly, else the first -- and how
  // long that call may take (prefill_client.h); empty = prompts are prefilled here.
  std::vector<std::string> prefill_urls;
  std::chrono::milliseconds prefill_timeout{600000};
};

class HttpServer {
 public:
  HttpServer(AsyncEngine& engine, ServedModel model, ServerConfig config);
  ~HttpServer();

  // Binds (port 0: any free port), prints "strata: serving NAME on http://HOST:PORT" on stderr and
  // serves until shutdown() has drained every request; false (with a message on stderr) when the
  // port cannot be bound or the listener fails.
  bool listen();
  // The graceful shutdown above, from another thread (the signal thread); returns when no request
  // is in flight. A zero timeout cancels at once. Safe to call before listen() has bound: listen()
  // then returns at once.
  void shutdown(std::chrono::milliseconds timeout);
  // A second signal: what shutdown() still waits for is cancelled now.
  void shutdown_now();

 private:
  // On the transport's I/O thread: health, models, metrics, unknown paths and wrong methods.
  std::optional<HttpResponse> quick(const HttpRequest& req);
  // On a handler thread: the POST endpoints.
  void handle(const HttpRequest& req, HttpResponder& res);
  // POST /v1/completions and (chat) /v1/chat/completions.
  void completions(const HttpRequest& req, HttpResponder& res, bool chat);
  void tokenize(const HttpRequest& req, HttpResponder& res);
  void detokenize(const HttpRequest& req, HttpResponder& res);
  // POST /reset_prefix_cache (vLLM's): 200 with no body once the engine dropped its cached
  // blocks; 409 while requests are in flight.
  void reset_prefix_cache(const HttpRequest& req, HttpResponder& res);
  void streaming_completion(CompletionCall& call, HttpResponder& res);
  void plain_completion(CompletionCall& call, HttpResponder& res);
  // --role decode: has the prefill instance compute each of a request's prompts (one after
  // another, under its cache salt and the client's Authorization header); a prompt it fails is
  // computed here. Runs beside the engine, on a thread of the request's own, until done or
  // stopped (the request ended first).
  void prefill_prompts(const PrefillClient& prefill,
                       const std::vector<std::vector<int32_t>>& prompts,
                       const std::string& cache_salt, const std::string& authorization,
                       PrefillStop& stop);
  // The prefill instance for req (kPrefillHeader, else the first); null when this is not a
  // decode instance; a 400 naming the header when it names no configured one, or is sent to an
  // instance that has none.
  std::variant<const PrefillClient*, ApiError> prefill_for(const HttpRequest& req) const;
  // The key the request carries, if it is one of the configured keys ("" when none are).
  std::optional<std::string> tenant(const HttpRequest& req) const;
  // Counts `sequences` more against max_waiting_requests; false (nothing counted) at capacity.
  bool admit(int64_t sequences);
  void release(int64_t sequences);

  AsyncEngine& engine_;
  ServedModel model_;
  ServerConfig config_;
  Metrics metrics_;
  KvCacheFacts kv_facts_;
  std::atomic<int64_t> admitted_{0};   // sequences of requests admitted and not finished
  std::atomic<bool> draining_{false};  // shutdown() began: no new requests
  std::atomic<bool> aborting_{false};  // its timeout passed: what runs is cancelled
  std::atomic<bool> bound_{false};
  std::mutex bind_mu_;  // orders bind against shutdown
  std::unique_ptr<HttpTransport> http_;
  std::vector<PrefillClient> prefill_;  // ServerConfig::prefill_urls
  std::atomic<int64_t> prefill_failures_{0};
};

}  // namespace strata::server

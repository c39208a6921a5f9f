#pragma once
// HttpServer: Strata's OpenAI-compatible HTTP front (cpp-httplib), over an AsyncEngine.
//
//   POST /v1/completions   prompt(s) as text or token ids; streaming (SSE) or not; OpenAI errors
//   POST /v1/chat/completions   messages rendered with the model's chat template
//   GET  /v1/models        the served model
//   GET  /health           200 while serving
//   GET  /metrics          Prometheus text, vLLM-style names under strata:
//   POST /tokenize, /detokenize   the model's tokenizer
//
// Handler threads parse and validate, submit to the engine thread, and wait on their request's
// stream; a streaming client that disconnects is cancelled within one poll (50 ms). Every bad
// request gets an OpenAI error object and leaves the others alone.
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
#include <string>

#include "server/active_requests.h"
#include "server/async_engine.h"
#include "server/completion_request.h"
#include "server/metrics.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace strata::server {

class Listener;         // httplib::Server with access to its listening socket
struct CompletionCall;  // one completion request being served (completion_handler.cc)

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  int num_threads = 0;                // 0 = max_num_seqs + 16
  size_t max_body_bytes = 16u << 20;  // 413 beyond
  // Bearer key required on /v1/* (401 otherwise); empty = open. Each key's requests are a tenant
  // of the prefix cache: the engine salts them apart.
  std::string api_key;
  // Requests admitted but not finished beyond which new ones get 503 + Retry-After; 0 = no bound.
  int64_t max_waiting_requests = 0;
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
  void routes();
  // POST /v1/completions and (chat) /v1/chat/completions.
  void completions(const httplib::Request& req, httplib::Response& res, bool chat);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void streaming_completion(std::shared_ptr<CompletionCall> call, httplib::Response& res);
  void plain_completion(CompletionCall& call, httplib::Response& res);
  // 503 for new work while shutting down, 401 without the key, 503 + Retry-After at capacity.
  bool reject(const httplib::Request& req, httplib::Response& res);

  AsyncEngine& engine_;
  ServedModel model_;
  ServerConfig config_;
  Metrics metrics_;
  KvCacheFacts kv_facts_;
  ActiveRequests active_;
  std::atomic<bool> draining_{false};  // shutdown() began: no new requests
  std::atomic<bool> aborting_{false};  // its timeout passed: what runs is cancelled
  std::atomic<int> port_{-1};          // bound port; -1 before listen() binds
  std::unique_ptr<Listener> http_;
};

}  // namespace strata::server

#pragma once
// Router: `strata route`, an OpenAI-compatible front that sends each request to one of several
// `strata serve` instances (docs/router.md).
//
//   GET  /health      200 while at least one instance is healthy, else 503
//   GET  /metrics     the router's own Prometheus text (strata:router_* names)
//   anything else     forwarded unchanged to the instance the policy picks: completions and chat
//                     (SSE streams passed through as they come), /v1/models, /tokenize, ...
//
// For the prefix policy each completion or chat request is parsed and its prompt built as the
// instances build it (the same tokenizer, chat template and parser); its full blocks are hashed
// with the instances' chain hash and cache salt and looked up in each instance's PrefixIndex,
// fed by the instance's KV events. A request the router cannot parse still goes to an instance
// (least loaded), whose answer -- an OpenAI error object -- the client gets unchanged.
//
// Failures: an instance that cannot be reached before it answered is taken out and the request
// tried once more on another; one that fails mid-answer ends the stream with an error event and
// [DONE] (a plain answer: 502 with an OpenAI error object). HealthMonitor puts instances back.
//
// Thread-safety: listen() from one thread; shutdown() from any.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "router/backend_spec.h"
#include "router/routing_policy.h"
#include "server/completion_request.h"
#include "server/http_types.h"

namespace strata::router {

struct RouterConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<BackendSpec> backends;  // at least one
  // Disaggregated instances (docs/router.md): with prefill_backends, `backends` are --role
  // decode instances. A completion goes to the least loaded decode instance, told in
  // server::kPrefillHeader which prefill instance computes its prompt: the one `policy` picks
  // among prefill_backends (by their KV events, for the prefix policy). The decode instances'
  // --prefill-url must name the prefill_backends' URLs as written here.
  std::vector<BackendSpec> prefill_backends;
  Policy policy = Policy::kPrefix;
  // The prefix policy's bound (routing_policy.h): an instance gets a request for its prefix
  // only while its requests in flight stay within balance_factor x the mean + 1.
  double balance_factor = 1.5;
  // The instances' model as the request parser needs it: tokenizer (with its chat template),
  // special_tokens_in_content, vocab size; max_model_len is left to the instances to check.
  server::ServedModel model;
  // The instances' --cache-salt-secret-file contents: with it, a request's bearer key is its
  // tenant as the instances derive it; "" = requests carry only their own cache_salt.
  std::string cache_salt_secret;
  server::HttpLimits limits{.num_handler_threads = 256};
  std::chrono::milliseconds backend_timeout{600'000};  // connection and each read
  std::chrono::milliseconds poll_period{500};          // /metrics; /health every second one
  std::chrono::milliseconds replay_timeout{2'000};
};

class Router {
 public:
  explicit Router(RouterConfig config);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Binds (port 0: any free port), prints "strata: routing to N instances on http://HOST:PORT"
  // on stderr and serves until shutdown(); false (with a message) when the port cannot be bound.
  bool listen();
  void shutdown();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::router

#pragma once
// Forwarding one request to an instance and its answer back to the client, unchanged: method,
// target, body and end-to-end headers go as they came; the status, the body and the headers
// come back (hop-by-hop headers and the framing are each side's own). A server-sent event stream
// (text/event-stream) goes to the client chunk by chunk as the instance writes it; any other
// answer is read whole first.
//
// The exchange runs on one of the instance's keep-alive connections (ConnectionPool), given back
// for the next request when it ended cleanly. A client that goes away -- seen at the next chunk
// it cannot take, or by the DisconnectWatch while the instance computes -- closes that
// connection at once, so the instance cancels the request and frees its blocks.
//
// Thread-safe: each call uses its own connection on the calling thread.

#include <chrono>
#include <string>

#include "router/connection_pool.h"
#include "router/disconnect_watch.h"
#include "server/http_responder.h"
#include "server/http_types.h"

namespace strata::router {

enum class ProxyOutcome {
  kAnswered,      // the instance's answer reached the client (whatever its status)
  kNoAnswer,      // the instance failed before any byte of an answer: nothing was sent
  kCutMidStream,  // the instance failed during a stream: an SSE error event and [DONE] ended it
  kCutMidBody,    // the instance failed during a plain answer: the client got a 502
  kClientGone,    // the client went away; the instance's connection was closed
};

// `error` (kNoAnswer) says what failed. A kept connection that fails before any answer (the
// instance closed it as it was taken) is tried once more on a new one.
// extra: headers the router adds (server::kPrefillHeader); a client's own kPrefillHeader is
// never passed on.
ProxyOutcome forward_request(ConnectionPool& pool, const server::HttpRequest& req,
                             server::HttpResponder& res, DisconnectWatch& watch,
                             const server::HttpHeaders& extra, std::string& error);

// One call the router makes itself (not a client's): the answer read whole.
struct InstanceAnswer {
  bool answered = false;  // false: no answer (error says why)
  int status = 0;
  std::string body;
  std::string error;
};
InstanceAnswer call_instance(ConnectionPool& pool, const server::HttpRequest& req);

// The OpenAI error object the router answers by itself (no instance, an instance cut off).
std::string router_error_json(int status, const std::string& message);

}  // namespace strata::router

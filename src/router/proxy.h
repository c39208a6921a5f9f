#pragma once
// Forwarding one request to an instance and its answer back to the client, unchanged: method,
// target, body and end-to-end headers go as they came; the status, the body and the headers
// come back (hop-by-hop headers and the framing are each side's own). A server-sent event stream
// (text/event-stream) goes to the client chunk by chunk as the instance writes it; any other
// answer is read whole first.
//
// Thread-safe: each call makes its own connection (cpp-httplib's client) on the calling thread.

#include <chrono>
#include <string>

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

// url: http://HOST:PORT. timeout bounds the connection and every read from the instance.
// `error` (kNoAnswer) says what failed.
ProxyOutcome forward_request(const std::string& url, const server::HttpRequest& req,
                             server::HttpResponder& res, std::chrono::milliseconds timeout,
                             std::string& error);

// The OpenAI error object the router answers by itself (no instance, an instance cut off).
std::string router_error_json(int status, const std::string& message);

}  // namespace strata::router

#pragma once
// HttpTransport: Strata's HTTP/1.1 front end, event-driven on Boost.Asio with Boost.Beast's
// parser and serializer.
//
// One I/O thread accepts connections and reads every request whole (head and body, chunked or
// not) under the bounds of HttpLimits; a slow or idle client costs a socket and its bytes so far,
// never a thread. Only a complete request reaches a handler:
//   - the quick handler, on the I/O thread (health, models, metrics: no blocking), whose response
//     is written asynchronously;
//   - otherwise the request handler, on a HandlerPool thread, which holds the connection alone
//     and answers through an HttpResponder (blocking writes with a deadline).
// Then the connection reads its next request (pipelined bytes already buffered are kept), or
// closes. Bounds broken by a client get their status at once and the connection closes:
// 400 (malformed, a bad Content-Length), 408 (read deadline, bytes received), 413 (body), 431
// (head), 503 + Retry-After (body memory or the handler queue full). Connections beyond the total
// or per-address cap get a 503 and are closed on accept.
//
// Thread-safety: bind(), run() from one thread; stop_accepting(), stop(),
// handlers() and stats() from any.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "server/handler_pool.h"
#include "server/http_responder.h"
#include "server/http_types.h"

namespace strata::server {

// A response built without blocking, for the quick handler and the transport's own errors.
struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  HttpHeaders headers;
  bool close = false;  // the connection's last
};

struct TransportStats {
  int64_t num_connections = 0;
  int64_t num_rejected_connections = 0;  // closed at accept: a connection cap
  int64_t num_timed_out = 0;             // closed by the read deadline
  int64_t buffered_body_bytes = 0;
};

class HttpTransport {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponder&)>;
  using QuickHandler = std::function<std::optional<HttpResponse>(const HttpRequest&)>;
  // The body of an error the transport answers by itself (status, message).
  using ErrorBody = std::function<HttpResponse(int status, const std::string& message)>;

  HttpTransport(HttpLimits limits, Handler handler, QuickHandler quick, ErrorBody error_body);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens (port 0: any free port); the bound port. Raises the process's open-file
  // limit to what max_connections needs where the hard limit allows, else lowers the cap.
  Result<int> bind(const std::string& host, int port);
  // Serves on this thread (the I/O thread) until stop(); returns once every handler is done.
  void run();
  // New connections are refused; open ones keep being served.
  void stop_accepting();
  // Closes everything: sockets are shut down, queued requests dropped, run() returns once the
  // running handlers are done.
  void stop();

  HandlerPool& handlers();
  TransportStats stats() const;
  const HttpLimits& limits() const;

  struct Impl;  // the I/O objects, the connections and the handler pool (http_transport.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::server

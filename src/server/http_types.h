#pragma once
// The HTTP transport's request and its limits: what HttpTransport hands a handler once a whole
// request has been read, and every bound the transport enforces on what a client may send.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::server {

// The header with which a router (strata route) names, per request, which of a decode
// instance's prefill instances computes the prompt: one of its --prefill-url, exactly.
inline constexpr std::string_view kPrefillHeader = "X-Strata-Prefill-Url";

// One complete HTTP/1.x request. The body is every byte the client sent (NULs included), the
// chunked framing removed.
struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // the request target as sent: path and query, percent-escapes kept
  std::string path;    // target up to '?'
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;
  std::string remote_addr;  // the client's address, numeric

  // The first header of this name (case-insensitive), or "" when there is none.
  std::string_view header(std::string_view name) const;
  // The key of an "Authorization: Bearer KEY" header, or nullopt when there is no such header.
  std::optional<std::string_view> bearer_key() const;
};

// What one client may cost the server. Every bound answers early with its status and closes the
// connection; none of them needs a handler thread.
struct HttpLimits {
  size_t max_body_bytes = 16u << 20;   // 413: Content-Length and chunked bodies alike
  size_t max_header_bytes = 64u << 10;  // 431: request line and all header lines together
  // A request must be read whole (head and body) within this time of its connection becoming
  // idle (accepted, or its previous response written); a keep-alive connection idle this long is
  // closed. Slow clients cost a socket and their bytes so far, never a thread.
  std::chrono::milliseconds read_timeout{30'000};
  // A response write that makes no progress for this long ends the request (the client stopped
  // reading); its engine requests are cancelled.
  std::chrono::milliseconds write_timeout{30'000};
  int max_connections = 4096;             // beyond: new connections are closed at once
  int max_connections_per_client = 1024;  // per remote address
  // Request bodies held in memory at once, over all connections (read so far, queued or being
  // handled); a request that would pass it gets 503 + Retry-After.
  size_t max_buffered_body_bytes = size_t{1} << 30;
  int num_handler_threads = 64;  // handlers that may block (completions); must be >= 1
  // Complete requests waiting for a handler thread; beyond: 503 + Retry-After.
  int max_queued_requests = 1024;
};

}  // namespace strata::server

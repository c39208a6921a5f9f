// Fuzzes the HTTP transport (src/server/http_transport.cc) the way a client meets it: each input
// is the bytes one client sends on one connection (request lines, header fields, chunked framing,
// bodies, pipelined requests), over a real socket to a real HttpTransport. The server must answer
// with well-formed HTTP/1.1 responses (each is parsed back here) and close the connection once the
// client has stopped sending, within a bound: a hang, a crash or a malformed response fails.

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "server/http_transport.h"

namespace {

using strata::server::HttpRequest;
using strata::server::HttpResponder;
using strata::server::HttpResponse;

// The handler exercises every way a handler answers: plain, streamed, an exception, nothing.
void handle(const HttpRequest& req, HttpResponder& res) {
  if (req.path == "/throw") throw std::runtime_error("handler failure");
  if (req.path == "/none") return;
  if (req.path == "/stream") {
    res.begin_stream(200, "text/event-stream");
    for (int i = 0; i < 3; ++i) res.write_chunk("data: " + std::to_string(req.body.size()) + "\n\n");
    res.end_stream();
    return;
  }
  res.send(200, "text/plain", req.method + " " + req.path + " " + std::to_string(req.body.size()));
}

int start_server() {
  strata::server::HttpLimits limits;
  limits.max_body_bytes = 64u << 10;
  limits.max_header_bytes = 4u << 10;
  limits.read_timeout = std::chrono::seconds(2);
  limits.write_timeout = std::chrono::seconds(2);
  limits.num_handler_threads = 2;
  limits.max_queued_requests = 4;
  auto* t = new strata::server::HttpTransport(
      limits, handle,
      [](const HttpRequest& req) -> std::optional<HttpResponse> {
        if (req.path != "/health") return std::nullopt;
        return HttpResponse{200, "text/plain", "", {}, false};
      },
      [](int status, const std::string& message) {
        return HttpResponse{status, "application/json", "{\"error\":\"" + message + "\"}", {}, true};
      });
  const strata::Result<int> port = t->bind("127.0.0.1", 0);
  if (!port.ok()) std::abort();
  std::thread([t] { t->run(); }).detach();
  return *port;
}

// Every byte the server sent must be a sequence of whole HTTP/1.1 responses (100 Continue
// interim responses included), the last possibly cut by a close.
void check_responses(const std::string& bytes) {
  namespace http = boost::beast::http;
  size_t at = 0;
  while (at < bytes.size()) {
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.body_limit(1u << 20);
    boost::system::error_code ec;
    const size_t used = parser.put(boost::asio::buffer(bytes.data() + at, bytes.size() - at), ec);
    if (ec == http::error::need_more) return;  // a response cut short by the close
    if (ec || used == 0) {
      std::fprintf(stderr, "malformed response at byte %zu: %s\n", at, ec.message().c_str());
      std::abort();
    }
    at += used;
    if (!parser.is_done()) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int port = start_server();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
  std::string received;
  char buf[4096];
  size_t sent = 0;
  bool shut = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    if (sent == size && !shut) {
      ::shutdown(fd, SHUT_WR);
      shut = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (shut ? 0 : POLLOUT)), 0};
    if (::poll(&p, 1, 100) < 0) std::abort();
    if (p.revents & POLLOUT) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
      if (n < 0) {  // the server closed early (an error response): stop sending
        sent = size;
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      received.append(buf, static_cast<size_t>(n));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "the server did not close the connection within 10 s\n");
      std::abort();
    }
  }
  ::close(fd);
  check_responses(received);
  return 0;
}

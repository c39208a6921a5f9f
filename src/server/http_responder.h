#pragma once
// HttpResponder: how a handler thread answers one request, on a connection it holds alone while
// the handler runs. Responses are framed by Boost.Beast's serializer and written to the socket
// with a deadline per write (HttpLimits::write_timeout), so a client that stops reading costs
// the handler at most that long; every write reports whether the client is still there.
//
// Either send() once, or begin_stream(), write_chunk()*, end_stream() (chunked transfer
// encoding). Not thread-safe: one handler thread uses it.

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

class HttpResponder {
 public:
  // fd: the connection's socket, borrowed; version: the request's (10 or 11); keep_alive: what
  // the request asked for.
  HttpResponder(int fd, unsigned version, bool keep_alive, std::chrono::milliseconds write_timeout);

  // A whole response. False when it could not be written (the client went away or stalled).
  bool send(int status, std::string_view content_type, std::string body,
            const HttpHeaders& headers = {});
  // The head of a chunked response; then chunks, then its end.
  bool begin_stream(int status, std::string_view content_type, const HttpHeaders& headers = {});
  bool write_chunk(std::string_view data);
  bool end_stream();

  // True once the client has closed or reset the connection (checked without blocking; bytes of
  // a pipelined next request do not count as gone).
  bool client_gone() const;
  // The socket part of client_gone(): whether the client closed or reset the connection. Reads
  // only the socket (poll, peek), so another thread may ask while this one writes.
  bool peer_closed() const;
  // This response is the connection's last ("Connection: close"); call before sending.
  void close_after() { keep_alive_ = false; }
  // The client went away before its answer: nothing is sent, the connection closes.
  void abandon() { started_ = failed_ = true; }

  bool started() const { return started_; }
  // The connection can read its next request: a whole response went out and both sides want
  // to keep it.
  bool reusable() const { return keep_alive_ && complete_ && !failed_; }

 private:
  int fd_;
  unsigned version_;
  bool keep_alive_;
  std::chrono::milliseconds write_timeout_;
  bool started_ = false;   // a head was written (or attempted)
  bool complete_ = false;  // the whole response was written
  bool failed_ = false;    // a write failed: nothing more goes out
};

}  // namespace strata::server

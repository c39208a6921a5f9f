#include "server/http_responder.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>

namespace strata::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// A Beast SyncWriteStream over a borrowed socket: each write_some waits (poll) for room up to the
// write timeout, then sends what it can. Never raises SIGPIPE.
class DeadlineSocket {
 public:
  DeadlineSocket(int fd, std::chrono::milliseconds timeout) : fd_(fd), timeout_(timeout) {}

  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, error_code& ec) {
    iovec iov[16];
    size_t n = 0;
    for (auto it = asio::buffer_sequence_begin(buffers);
         it != asio::buffer_sequence_end(buffers) && n < std::size(iov); ++it) {
      const asio::const_buffer b(*it);
      if (b.size() == 0) continue;
      iov[n++] = {const_cast<void*>(b.data()), b.size()};
    }
    ec = {};
    if (n == 0) return 0;
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (;;) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0) return static_cast<size_t>(sent);
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = error_code(errno, boost::system::system_category());
        return 0;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        ec = asio::error::timed_out;
        return 0;
      }
      pollfd p{fd_, POLLOUT, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno != EINTR) {
        ec = error_code(errno, boost::system::system_category());
        return 0;
      }
      if (r > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
        ec = asio::error::connection_reset;
        return 0;
      }
    }
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  int fd_;
  std::chrono::milliseconds timeout_;
};

template <class Body>
void set_head(http::response<Body>& res, int status, std::string_view content_type,
              const HttpHeaders& headers, bool keep_alive) {
  res.result(static_cast<unsigned>(status));
  if (!content_type.empty()) res.set(http::field::content_type, boost::beast::string_view(content_type.data(), content_type.size()));
  for (const auto& [name, value] : headers) res.set(name, value);
  res.keep_alive(keep_alive);
}

}  // namespace

HttpResponder::HttpResponder(int fd, unsigned version, bool keep_alive,
                             std::chrono::milliseconds write_timeout)
    : fd_(fd), version_(version), keep_alive_(keep_alive), write_timeout_(write_timeout) {}

bool HttpResponder::send(int status, std::string_view content_type, std::string body,
                         const HttpHeaders& headers) {
  if (started_) return false;
  started_ = true;
  http::response<http::string_body> res;
  res.version(version_);
  set_head(res, status, content_type, headers, keep_alive_);
  res.body() = std::move(body);
  res.prepare_payload();
  DeadlineSocket socket(fd_, write_timeout_);
  error_code ec;
  http::write(socket, res, ec);
  failed_ = static_cast<bool>(ec);
  complete_ = !failed_;
  return complete_;
}

bool HttpResponder::begin_stream(int status, std::string_view content_type,
                                 const HttpHeaders& headers) {
  if (started_) return false;
  started_ = true;
  http::response<http::empty_body> res;
  res.version(version_);
  set_head(res, status, content_type, headers, keep_alive_);
  res.chunked(true);
  http::response_serializer<http::empty_body> serializer(res);
  DeadlineSocket socket(fd_, write_timeout_);
  error_code ec;
  http::write_header(socket, serializer, ec);
  failed_ = static_cast<bool>(ec);
  return !failed_;
}

bool HttpResponder::write_chunk(std::string_view data) {
  if (!started_ || failed_ || complete_) return false;
  if (data.empty()) return true;  // an empty chunk would end the body
  DeadlineSocket socket(fd_, write_timeout_);
  error_code ec;
  asio::write(socket, http::make_chunk(asio::const_buffer(data.data(), data.size())), ec);
  failed_ = static_cast<bool>(ec);
  return !failed_;
}

bool HttpResponder::end_stream() {
  if (!started_ || failed_ || complete_) return false;
  DeadlineSocket socket(fd_, write_timeout_);
  error_code ec;
  asio::write(socket, http::make_chunk_last(), ec);
  failed_ = static_cast<bool>(ec);
  complete_ = !failed_;
  return complete_;
}

bool HttpResponder::client_gone() const { return failed_ || peer_closed(); }

bool HttpResponder::peer_closed() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
  char byte;
  const ssize_t r = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace strata::server

#include "server/http_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace strata::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// Reading (and dropping) what a client still sends after an error response, so that closing
// does not reset the response away before the client has read it (nginx's lingering close).
constexpr auto kLingerTime = std::chrono::seconds(5);
constexpr size_t kLingerBytes = size_t{64} << 20;
constexpr char kTooManyConnections[] =
    "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
    "Content-Type: application/json\r\nContent-Length: 112\r\n\r\n"
    "{\"error\":{\"message\":\"too many connections; retry later\",\"type\":\"service_unavailable\","
    "\"param\":null,\"code\":null}}";

std::string str(beast::string_view s) { return {s.data(), s.size()}; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (iequals(n, name)) return v;
  }
  return {};
}

std::optional<std::string_view> HttpRequest::bearer_key() const {
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view auth = header("Authorization");
  if (!auth.starts_with(kBearer)) return std::nullopt;
  return auth.substr(kBearer.size());
}

class Connection;

struct HttpTransport::Impl {
  Impl(HttpLimits l, Handler h, QuickHandler q, ErrorBody e)
      : limits(l),
        handler(std::move(h)),
        quick(std::move(q)),
        error_body(std::move(e)),
        pool(l.num_handler_threads, l.max_queued_requests) {}

  void accept();
  void on_accept(const error_code& ec, tcp::socket socket);
  bool reserve_body(size_t bytes);
  void release_body(size_t bytes) { buffered -= static_cast<int64_t>(bytes); }
  void forget(Connection* c, const std::string& addr);
  template <class Fn>
  void for_each_connection(Fn fn);

  // Declared so that they are destroyed in a safe order: the I/O objects first, then the
  // io_context (whose pending handlers still release connections, which unregister below), then
  // the registry and the pool (stopped and idle by then).
  HttpLimits limits;
  Handler handler;
  QuickHandler quick;
  ErrorBody error_body;
  std::atomic<int64_t> buffered{0};
  std::atomic<int64_t> rejected{0};
  std::atomic<int64_t> timed_out{0};
  std::atomic<bool> stopping{false};
  HandlerPool pool;
  std::mutex mu;  // connections, per_client
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;
  std::unordered_map<std::string, int> per_client;
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
};

// One client connection. Lives on the I/O thread except while a handler thread holds it
// (state kHandling), when nothing else touches its socket.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class State { kReading, kHandling, kWriting, kClosed };

  Connection(HttpTransport::Impl& t, tcp::socket socket, std::string addr)
      : t_(t),
        stream_(std::move(socket)),
        buffer_(t.limits.max_header_bytes + (64u << 10)),
        addr_(std::move(addr)) {}
  ~Connection() {
    t_.release_body(reserved_);
    t_.forget(this, addr_);
  }

  void start_read();
  void close();
  // stop(): a handler's socket is shut down (its writes fail at once), the others closed.
  void abort() {
    if (state_ == State::kHandling) {
      ::shutdown(stream_.socket().native_handle(), SHUT_RDWR);
    } else {
      close();
    }
  }

 private:
  void on_header(const error_code& ec);
  void read_body();
  void on_read_error(const error_code& ec);
  void dispatch();
  void handle(const HttpRequest& request, bool keep_alive, unsigned version);
  void respond(HttpResponse response, bool keep_alive, unsigned version);
  void reply_error(int status, const std::string& message, bool retry_after = false);
  void next(bool reusable);
  void linger_close();
  void drain();

  HttpTransport::Impl& t_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string addr_;
  size_t reserved_ = 0;  // body bytes counted against the transport's budget
  State state_ = State::kReading;
  std::unique_ptr<std::array<char, 16384>> scratch_;  // linger_close's reads
  size_t drained_ = 0;
};

void Connection::start_read() {
  if (t_.stopping) return close();
  state_ = State::kReading;
  t_.release_body(reserved_);
  reserved_ = 0;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(t_.limits.max_header_bytes));
  parser_->body_limit(t_.limits.max_body_bytes);
  stream_.expires_after(t_.limits.read_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](const error_code& ec, size_t) {
                            self->on_header(ec);
                          });
}

void Connection::on_header(const error_code& ec) {
  if (ec) return on_read_error(ec);
  const size_t length = parser_->content_length().value_or(0);
  if (!t_.reserve_body(length)) {
    return reply_error(503, "the server is holding too many request bodies; retry later", true);
  }
  reserved_ = length;
  const auto expect = parser_->get()[http::field::expect];
  if (!parser_->is_done() && iequals(std::string_view(expect.data(), expect.size()),
                                     "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](const error_code& e, size_t) {
                        if (e) return self->close();
                        self->read_body();
                      });
    return;
  }
  read_body();
}

void Connection::read_body() {
  if (parser_->is_done()) return dispatch();
  http::async_read_some(stream_, buffer_, *parser_,
                        [self = shared_from_this()](const error_code& ec, size_t) {
                          if (ec) return self->on_read_error(ec);
                          // Chunked bodies announce no length: count them as they grow.
                          const size_t have = self->parser_->get().body().size();
                          if (have > self->reserved_) {
                            if (!self->t_.reserve_body(have - self->reserved_)) {
                              return self->reply_error(
                                  503, "the server is holding too many request bodies; retry later",
                                  true);
                            }
                            self->reserved_ = have;
                          }
                          self->read_body();
                        });
}

void Connection::on_read_error(const error_code& ec) {
  if (ec == beast::error::timeout) {
    ++t_.timed_out;
    return close();
  }
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return reply_error(431, "the request's header fields are too large (at most " +
                                std::to_string(t_.limits.max_header_bytes) + " bytes)");
  }
  if (ec == http::error::body_limit) {
    return reply_error(413, "the request body is too large (at most " +
                                std::to_string(t_.limits.max_body_bytes) + " bytes)");
  }
  if (ec.category() == make_error_code(http::error::bad_target).category() &&
      ec != http::error::end_of_stream &&
      ec != http::error::partial_message && ec != http::error::need_more) {
    return reply_error(400, "malformed HTTP request: " + ec.message());
  }
  close();  // the client closed or reset the connection, or the transport stops
}

void Connection::dispatch() {
  stream_.expires_never();
  auto& msg = parser_->get();
  auto request = std::make_shared<HttpRequest>();
  request->method = str(msg.method_string());
  request->target = str(msg.target());
  request->path = request->target.substr(0, request->target.find('?'));
  for (const auto& field : msg) {
    request->headers.emplace_back(str(field.name_string()), str(field.value()));
  }
  request->body = std::move(msg.body());
  request->remote_addr = addr_;
  const bool keep_alive = parser_->keep_alive();
  const unsigned version = msg.version();
  parser_.reset();
  if (std::optional<HttpResponse> quick = t_.quick(*request)) {
    return respond(std::move(*quick), keep_alive, version);
  }
  state_ = State::kHandling;
  const bool queued = t_.pool.try_push([self = shared_from_this(), request, keep_alive, version] {
    self->handle(*request, keep_alive, version);
  });
  if (!queued) {
    state_ = State::kReading;
    reply_error(503, "the server is at capacity; retry later", true);
  }
}

// On a handler thread: the one place where a handler's exceptions end.
void Connection::handle(const HttpRequest& request, bool keep_alive, unsigned version) {
  HttpResponder responder(stream_.socket().native_handle(), version,
                          keep_alive && !t_.stopping, t_.limits.write_timeout);
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "strata: error: %s %s: %s\n", request.method.c_str(),
                 request.path.substr(0, 64).c_str(), what);
    if (responder.started()) return;
    const HttpResponse e = t_.error_body(500, "internal error while handling the request");
    responder.close_after();
    responder.send(e.status, e.content_type, e.body, e.headers);
  };
  try {
    t_.handler(request, responder);
    if (!responder.started()) fail("the handler sent no response");
  } catch (const std::exception& e) {
    fail(e.what());
  } catch (...) {
    fail("unknown exception");
  }
  asio::post(stream_.get_executor(),
             [self = shared_from_this(), reusable = responder.reusable()] { self->next(reusable); });
}

void Connection::respond(HttpResponse response, bool keep_alive, unsigned version) {
  state_ = State::kWriting;
  auto res = std::make_shared<http::response<http::string_body>>();
  res->version(version);
  res->result(static_cast<unsigned>(response.status));
  if (!response.content_type.empty()) res->set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) res->set(name, value);
  res->keep_alive(keep_alive && !response.close && !t_.stopping);
  res->body() = std::move(response.body);
  res->prepare_payload();
  stream_.expires_after(t_.limits.write_timeout);
  http::async_write(stream_, *res, [self = shared_from_this(), res](const error_code& ec, size_t) {
    if (ec) return self->close();
    if (res->keep_alive()) return self->next(true);
    self->linger_close();
  });
}

void Connection::reply_error(int status, const std::string& message, bool retry_after) {
  HttpResponse e = t_.error_body(status, message);
  if (retry_after) e.headers.emplace_back("Retry-After", "1");
  e.close = true;
  parser_.reset();
  respond(std::move(e), false, 11);
}

void Connection::next(bool reusable) {
  if (state_ == State::kClosed) return;
  if (reusable && !t_.stopping) return start_read();
  if (reusable) return close();
  linger_close();
}

// Closes after an error response without resetting it away: stop sending, read (and drop) what
// the client still sends for a moment, then close.
void Connection::linger_close() {
  state_ = State::kWriting;
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  scratch_ = std::make_unique<std::array<char, 16384>>();
  stream_.expires_after(kLingerTime);
  drain();
}

void Connection::drain() {
  stream_.async_read_some(asio::buffer(*scratch_),
                          [self = shared_from_this()](const error_code& ec, size_t n) {
                            self->drained_ += n;
                            if (ec || self->drained_ > kLingerBytes) return self->close();
                            self->drain();
                          });
}

void Connection::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

bool HttpTransport::Impl::reserve_body(size_t bytes) {
  const auto n = static_cast<int64_t>(bytes);
  const int64_t before = buffered.fetch_add(n);
  if (before + n <= static_cast<int64_t>(limits.max_buffered_body_bytes)) return true;
  buffered -= n;
  return false;
}

void HttpTransport::Impl::forget(Connection* c, const std::string& addr) {
  std::lock_guard<std::mutex> lock(mu);
  connections.erase(c);
  auto it = per_client.find(addr);
  if (it != per_client.end() && --it->second == 0) per_client.erase(it);
}

template <class Fn>
void HttpTransport::Impl::for_each_connection(Fn fn) {
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [ptr, weak] : connections) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  for (auto& c : live) fn(*c);
}

void HttpTransport::Impl::accept() {
  acceptor.async_accept(io, [this](const error_code& ec, tcp::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void HttpTransport::Impl::on_accept(const error_code& ec, tcp::socket socket) {
  if (!acceptor.is_open() || ec == asio::error::operation_aborted) return;
  if (ec) {  // out of descriptors, say: try again shortly rather than spin
    accept_retry.expires_after(std::chrono::milliseconds(50));
    accept_retry.async_wait([this](const error_code& e) {
      if (!e && acceptor.is_open()) accept();
    });
    return;
  }
  error_code e;
  const tcp::endpoint peer = socket.remote_endpoint(e);
  std::string addr = e ? std::string() : peer.address().to_string();
  bool admitted = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    int& mine = per_client[addr];
    if (static_cast<int>(connections.size()) < limits.max_connections &&
        mine < limits.max_connections_per_client) {
      ++mine;
      admitted = true;
    } else if (mine == 0) {
      per_client.erase(addr);
    }
  }
  if (!admitted) {
    ++rejected;
    ::send(socket.native_handle(), kTooManyConnections, sizeof(kTooManyConnections) - 1,
           MSG_DONTWAIT | MSG_NOSIGNAL);
    socket.close(e);
    return accept();
  }
  socket.set_option(tcp::no_delay(true), e);
  auto c = std::make_shared<Connection>(*this, std::move(socket), std::move(addr));
  {
    std::lock_guard<std::mutex> lock(mu);
    connections.emplace(c.get(), c);
  }
  c->start_read();
  accept();
}

HttpTransport::HttpTransport(HttpLimits limits, Handler handler, QuickHandler quick,
                             ErrorBody error_body)
    : impl_(std::make_unique<Impl>(limits, std::move(handler), std::move(quick),
                                   std::move(error_body))) {}

HttpTransport::~HttpTransport() {
  stop();
  impl_->pool.wait_idle(HandlerPool::Clock::time_point::max(), /*interruptible=*/false);
}

Result<int> HttpTransport::bind(const std::string& host, int port) {
  HttpLimits& l = impl_->limits;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t want = static_cast<rlim_t>(l.max_connections) + 256;
    if (files.rlim_cur < want) {
      files.rlim_cur = std::min(want, files.rlim_max);
      setrlimit(RLIMIT_NOFILE, &files);
    }
    if (files.rlim_cur < want) {
      const int cap = std::max<int>(16, static_cast<int>(files.rlim_cur) - 256);
      std::fprintf(stderr,
                   "strata: the open-file limit (%llu) allows %d connections, not %d\n",
                   static_cast<unsigned long long>(files.rlim_cur), cap, l.max_connections);
      l.max_connections = cap;
    }
  }
  error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec || endpoints.empty()) {
    return Status::InvalidArgument("cannot resolve " + host + ": " + ec.message());
  }
  const tcp::endpoint ep = *endpoints.begin();
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    a.close();
    return Status::Unavailable("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                               ec.message());
  }
  return static_cast<int>(a.local_endpoint().port());
}

void HttpTransport::run() {
  Impl& t = *impl_;
  if (t.acceptor.is_open()) t.accept();
  t.io.run();
  // Handlers still running post their connection's next step: let them finish, then run those.
  t.pool.wait_idle(HandlerPool::Clock::time_point::max(), /*interruptible=*/false);
  t.io.restart();
  t.io.poll();
}

void HttpTransport::stop_accepting() {
  asio::post(impl_->io, [this] {
    error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_retry.cancel();
  });
}

void HttpTransport::stop() {
  if (impl_->stopping.exchange(true)) return;
  asio::post(impl_->io, [this] {
    error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_retry.cancel();
    impl_->for_each_connection([](Connection& c) { c.abort(); });
    impl_->work.reset();
  });
  impl_->pool.stop();
}

HandlerPool& HttpTransport::handlers() { return impl_->pool; }

const HttpLimits& HttpTransport::limits() const { return impl_->limits; }

TransportStats HttpTransport::stats() const {
  TransportStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s.num_connections = static_cast<int64_t>(impl_->connections.size());
  }
  s.num_rejected_connections = impl_->rejected;
  s.num_timed_out = impl_->timed_out;
  s.buffered_body_bytes = impl_->buffered;
  return s;
}

}  // namespace strata::server

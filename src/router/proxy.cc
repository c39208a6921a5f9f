#include "router/proxy.h"

#include <httplib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <string_view>
#include <utility>

#include "server/api_error.h"

namespace strata::router {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Headers that belong to one connection, not to the request or answer (RFC 9110 7.6.1), and the
// framing each side writes itself.
bool hop_by_hop(std::string_view name) {
  static constexpr std::array<std::string_view, 10> kNames = {
      "connection", "keep-alive",  "proxy-connection", "transfer-encoding",
      "te",         "trailer",     "upgrade",          "content-length",
      "host",       "content-type"};
  return std::any_of(kNames.begin(), kNames.end(),
                     [&](std::string_view n) { return same_name(name, n); });
}

}  // namespace

std::string router_error_json(int status, const std::string& message) {
  server::ApiError e;
  e.http_status = status;
  e.type = status == 503 ? "service_unavailable" : status == 409 ? "conflict_error" : "server_error";
  e.message = message;
  return e.to_json();
}

namespace {

// The request as the instance gets it: the client's end-to-end headers, its body.
httplib::Request outgoing(const server::HttpRequest& req, const server::HttpHeaders& extra = {}) {
  httplib::Request out;
  out.method = req.method;
  out.path = req.target;
  out.body = req.body;
  const std::string content_type(req.header("Content-Type"));
  for (const auto& [name, value] : req.headers) {
    if (!hop_by_hop(name) && !same_name(name, server::kPrefillHeader)) {
      out.headers.emplace(name, value);
    }
  }
  for (const auto& [name, value] : extra) out.headers.emplace(name, value);
  if (!req.body.empty() || req.method == "POST") {
    out.headers.emplace("Content-Type", content_type.empty() ? "application/json" : content_type);
  }
  return out;
}

// Whether the connection may serve another exchange after this answer.
bool keeps_alive(const httplib::Response& answer) {
  std::string c = answer.get_header_value("Connection");
  for (char& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return c != "close";
}

// One exchange on one connection (forward_request's attempt).
struct Exchange {
  bool ok = false;
  bool answered = false;  // the instance's head arrived
  bool streaming = false;
  std::atomic<bool> client_gone{false};
  int status = 0;
  std::string answer_type;
  server::HttpHeaders answer_headers;
  std::string body;
  httplib::Error err = httplib::Error::Success;
  bool keep_alive = false;
};

void run_exchange(ConnectionPool::Connection& conn, const server::HttpRequest& req,
                  const server::HttpHeaders& extra, server::HttpResponder& res,
                  DisconnectWatch& watch, Exchange& x) {
  httplib::Request out = outgoing(req, extra);
  out.response_handler = [&](const httplib::Response& r) {
    x.answered = true;
    x.status = r.status;
    for (const auto& [name, value] : r.headers) {
      if (!hop_by_hop(name)) x.answer_headers.emplace_back(name, value);
    }
    x.answer_type = r.get_header_value("Content-Type");
    x.streaming = x.answer_type.starts_with("text/event-stream");
    if (x.streaming && !res.begin_stream(x.status, x.answer_type, x.answer_headers)) {
      x.client_gone = true;
      return false;
    }
    return true;
  };
  out.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (!x.streaming) {
      x.body.append(data, n);
      return true;
    }
    if (!res.write_chunk(std::string_view(data, n)) || res.client_gone()) {
      x.client_gone = true;
      return false;
    }
    return true;
  };
  httplib::Client* const client = conn.client.get();
  const uint64_t watched = watch.add(res, [&x, client] {
    x.client_gone = true;
    client->stop();  // the exchange under way fails at once; the socket closes after it
  });
  httplib::Response answer;
  x.ok = client->send(out, answer, x.err);
  watch.remove(watched);
  x.keep_alive = x.ok && keeps_alive(answer);
}

}  // namespace

ProxyOutcome forward_request(ConnectionPool& pool, const server::HttpRequest& req,
                             server::HttpResponder& res, DisconnectWatch& watch,
                             const server::HttpHeaders& extra, std::string& error) {
  for (int attempt = 0;; ++attempt) {
    ConnectionPool::Connection conn = pool.take(/*fresh=*/attempt > 0);
    const bool reused = conn.reused;
    Exchange x;
    run_exchange(conn, req, extra, res, watch, x);
    pool.give_back(std::move(conn), x.keep_alive && !x.client_gone);
    if (x.client_gone) {
      res.abandon();
      return ProxyOutcome::kClientGone;
    }
    if (!x.ok && !x.answered) {
      // A kept connection the instance closed as it was taken: once more on a new one.
      if (reused && attempt == 0) continue;
      error = httplib::to_string(x.err);
      return ProxyOutcome::kNoAnswer;
    }
    if (!x.ok && x.streaming) {
      const std::string e = router_error_json(
          502, "the instance failed during the stream (" + httplib::to_string(x.err) + ")");
      res.write_chunk("data: " + e + "\n\ndata: [DONE]\n\n");
      res.end_stream();
      return ProxyOutcome::kCutMidStream;
    }
    if (!x.ok) {
      res.close_after();
      res.send(502, "application/json",
               router_error_json(502, "the instance failed during its answer (" +
                                          httplib::to_string(x.err) + ")"));
      return ProxyOutcome::kCutMidBody;
    }
    if (x.streaming) {
      res.end_stream();
    } else {
      res.send(x.status, x.answer_type, std::move(x.body), x.answer_headers);
    }
    return ProxyOutcome::kAnswered;
  }
}

InstanceAnswer call_instance(ConnectionPool& pool, const server::HttpRequest& req) {
  InstanceAnswer a;
  for (int attempt = 0; attempt < 2; ++attempt) {
    ConnectionPool::Connection conn = pool.take(/*fresh=*/attempt > 0);
    httplib::Request out = outgoing(req);
    httplib::Response answer;
    httplib::Error err = httplib::Error::Success;
    const bool ok = conn.client->send(out, answer, err);
    const bool reused = conn.reused;
    pool.give_back(std::move(conn), ok && keeps_alive(answer));
    if (ok) {
      a.answered = true;
      a.status = answer.status;
      a.body = std::move(answer.body);
      return a;
    }
    a.error = httplib::to_string(err);
    if (!reused) break;
  }
  return a;
}

}  // namespace strata::router

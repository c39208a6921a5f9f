#include "router/proxy.h"

#include <httplib.h>

#include <array>
#include <string_view>
#include <utility>

#include "server/api_error.h"

namespace strata::router {
namespace {

// Headers that belong to one connection, not to the request or answer (RFC 9110 7.6.1), and the
// framing each side writes itself.
bool hop_by_hop(std::string_view name) {
  static constexpr std::array<std::string_view, 10> kNames = {
      "connection", "keep-alive",  "proxy-connection", "transfer-encoding",
      "te",         "trailer",     "upgrade",          "content-length",
      "host",       "content-type"};
  for (const std::string_view n : kNames) {
    if (name.size() == n.size() &&
        std::equal(name.begin(), name.end(), n.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        })) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string router_error_json(int status, const std::string& message) {
  server::ApiError e;
  e.http_status = status;
  e.type = status == 503 ? "service_unavailable" : "server_error";
  e.message = message;
  return e.to_json();
}

ProxyOutcome forward_request(const std::string& url, const server::HttpRequest& req,
                             server::HttpResponder& res, std::chrono::milliseconds timeout,
                             std::string& error) {
  httplib::Client client(url);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  client.set_keep_alive(false);
  httplib::Request out;
  out.method = req.method;
  out.path = req.target;
  out.body = req.body;
  std::string content_type(req.header("Content-Type"));
  for (const auto& [name, value] : req.headers) {
    if (!hop_by_hop(name)) out.headers.emplace(name, value);
  }
  if (!req.body.empty() || req.method == "POST") {
    out.headers.emplace("Content-Type", content_type.empty() ? "application/json" : content_type);
  }
  bool answered = false;  // the instance's head arrived
  bool streaming = false;
  bool client_gone = false;
  int status = 0;
  std::string answer_type;
  server::HttpHeaders answer_headers;
  std::string body;
  out.response_handler = [&](const httplib::Response& r) {
    answered = true;
    status = r.status;
    for (const auto& [name, value] : r.headers) {
      if (!hop_by_hop(name)) answer_headers.emplace_back(name, value);
    }
    answer_type = r.get_header_value("Content-Type");
    streaming = answer_type.starts_with("text/event-stream");
    if (streaming && !res.begin_stream(status, answer_type, answer_headers)) {
      client_gone = true;
      return false;
    }
    return true;
  };
  out.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (!streaming) {
      body.append(data, n);
      return true;
    }
    if (!res.write_chunk(std::string_view(data, n)) || res.client_gone()) {
      client_gone = true;
      return false;
    }
    return true;
  };
  httplib::Response answer;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client.send(out, answer, err);
  if (client_gone) {
    res.abandon();
    return ProxyOutcome::kClientGone;
  }
  if (!ok && !answered) {
    error = httplib::to_string(err);
    return ProxyOutcome::kNoAnswer;
  }
  if (!ok && streaming) {
    const std::string e = router_error_json(
        502, "the instance failed during the stream (" + httplib::to_string(err) + ")");
    res.write_chunk("data: " + e + "\n\ndata: [DONE]\n\n");
    res.end_stream();
    return ProxyOutcome::kCutMidStream;
  }
  if (!ok) {
    res.close_after();
    res.send(502, "application/json",
             router_error_json(
                 502, "the instance failed during its answer (" + httplib::to_string(err) + ")"));
    return ProxyOutcome::kCutMidBody;
  }
  if (streaming) {
    res.end_stream();
  } else {
    res.send(status, answer_type, std::move(body), answer_headers);
  }
  return ProxyOutcome::kAnswered;
}

}  // namespace strata::router

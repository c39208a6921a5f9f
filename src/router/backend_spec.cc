#include "router/backend_spec.h"

#include <charconv>
#include <string>

#include "core/quote.h"

namespace strata::router {
namespace {

Status bad(std::string_view text, const std::string& why) {
  return Status::InvalidArgument("--backend " + quote(text) + ": " + why +
                                 " (http://HOST:PORT[,events=tcp://HOST:PORT"
                                 "[,replay=tcp://HOST:PORT]])");
}

// HOST:PORT with a non-empty host and a port in [1, 65535]; [v6]:PORT allowed.
bool host_port(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view host = s.substr(0, colon);
  const std::string_view port = s.substr(colon + 1);
  if (host.find_first_of("/?#@ \t") != std::string_view::npos) return false;
  if (host.front() != '[' && host.find(':') != std::string_view::npos) return false;
  int value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc() && end == port.data() + port.size() && !port.empty() && value >= 1 &&
         value <= 65535;
}

// The router connects, so a tcp:// address needs a host, not a bind wildcard.
bool zmq_endpoint(std::string_view s) {
  if (s.starts_with("tcp://")) return !s.starts_with("tcp://*:") && host_port(s.substr(6));
  return s.starts_with("ipc://") && s.size() > 6;
}

}  // namespace

Result<BackendSpec> parse_backend_spec(std::string_view text) {
  BackendSpec spec;
  std::string_view rest = text;
  const size_t comma = rest.find(',');
  std::string_view url = rest.substr(0, comma);
  if (text.ends_with(',')) return bad(text, "expected KEY=VALUE after a comma");
  rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  if (!url.starts_with("http://")) return bad(text, "the address must start with http://");
  if (url.size() > 7 && url.ends_with('/')) url.remove_suffix(1);
  if (!host_port(url.substr(7))) return bad(text, "the address must be http://HOST:PORT");
  spec.url = std::string(url);
  bool has_events = false;
  bool has_replay = false;
  while (!rest.empty()) {
    const size_t next = rest.find(',');
    const std::string_view item = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return bad(text, "expected KEY=VALUE after a comma");
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    bool* seen = key == "events" ? &has_events : key == "replay" ? &has_replay : nullptr;
    if (seen == nullptr) return bad(text, "unknown key " + quote(key));
    if (*seen) return bad(text, std::string(key) + " given twice");
    *seen = true;
    if (!zmq_endpoint(value)) {
      return bad(text, std::string(key) + " must be tcp://HOST:PORT or ipc://PATH");
    }
    (key == "events" ? spec.events : spec.replay) = std::string(value);
  }
  if (has_replay && !has_events) return bad(text, "replay needs events");
  return spec;
}

}  // namespace strata::router

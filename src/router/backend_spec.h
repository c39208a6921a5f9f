#pragma once
// BackendSpec: one `strata route --backend` argument, an instance the router sends requests to.
//
//   http://HOST:PORT[,events=tcp://HOST:PORT[,replay=tcp://HOST:PORT]]
//
// events: the instance's --kv-events-endpoint as the router connects to it (the prefix policy
// learns what the instance caches from it); replay: its --kv-events-replay-endpoint, asked for
// the batches the router missed. Plain data and a pure function: thread-safe.

#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::router {

struct BackendSpec {
  std::string url;     // http://HOST:PORT, no trailing slash
  std::string events;  // tcp://HOST:PORT or ipc://PATH; "" = no events
  std::string replay;  // the same forms; "" = no replay (only with events)

  bool operator==(const BackendSpec&) const = default;
};

// InvalidArgument naming what is wrong: not http://HOST:PORT, a path after the port, an unknown
// key, a key given twice, an endpoint that is not tcp:// or ipc://, replay without events.
Result<BackendSpec> parse_backend_spec(std::string_view text);

}  // namespace strata::router

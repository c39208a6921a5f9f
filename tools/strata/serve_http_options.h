#pragma once
// `strata serve`'s HTTP flags: the transport's limits and the API keys.

#include <string>
#include <vector>

#include "server/http_types.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct ServeHttpOptions {
  server::HttpLimits limits{.num_handler_threads = 0};
  double read_timeout_s = 30.0;
  double write_timeout_s = 30.0;
  std::vector<std::string> api_keys;  // --api-key, repeatable
  std::string api_key_file;           // one key per line
  bool metrics_require_key = false;
};

void add_serve_http_options(CLI::App& cmd, ServeHttpOptions& o);
// The limits with the timeouts applied.
server::HttpLimits http_limits(const ServeHttpOptions& o);
// --api-key values and the key file's keys (blank lines and lines starting with '#' skipped);
// throws strata::Error on an unreadable file, an empty file, or a key with spaces or controls.
std::vector<std::string> api_keys(const ServeHttpOptions& o);

}  // namespace strata::cli

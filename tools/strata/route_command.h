#pragma once
// `strata route`: the prefix-aware router in front of several `strata serve` instances
// (src/router, docs/router.md).

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace strata::cli {

struct RouteOptions {
  std::string model_dir;          // the instances' model: its tokenizer and chat template
  std::string tokenizer_dir;      // default: model_dir
  std::string served_model_name;  // default: the model directory's name, as serve's
  std::string chat_template_file;
  bool tokenize_special_in_content = false;
  std::vector<std::string> backends;  // http://HOST:PORT[,events=...[,replay=...]]
  std::vector<std::string> prefill_backends;  // --role prefill instances, the same form
  std::vector<std::string> decode_backends;   // --role decode instances
  std::string policy = "prefix";
  double balance_factor = 1.5;
  std::string cache_salt_secret_file;
  std::string host = "127.0.0.1";
  int port = 8000;
  double backend_timeout_s = 600.0;
};

void add_route_command(CLI::App& app, RouteOptions& options);
int run_route(const RouteOptions& options);

}  // namespace strata::cli

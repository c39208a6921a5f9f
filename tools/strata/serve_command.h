#pragma once
// `strata serve`: the OpenAI-compatible HTTP server (src/server) on one model.

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace strata::cli {

struct ServeOptions {
  std::string model_dir;
  std::string served_model_name;  // default: the model directory's name
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string load_format = "auto";
  int32_t threads = 0;
  int32_t block_size = 16;
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
  int32_t num_blocks = 0;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
  std::string preemption_mode = "recompute";
  double swap_space_gib = 4.0;
  std::string api_key;
  int64_t max_waiting_requests = 0;
};

void add_serve_command(CLI::App& app, ServeOptions& options);
int run_serve(const ServeOptions& options);

}  // namespace strata::cli

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
  std::string device = "auto";          // auto, cpu or cuda
  double gpu_memory_utilization = 0.9;  // cuda: share of GPU memory for weights, activations, KV
  int32_t block_size = 16;
  int64_t kv_cache_memory_bytes = 0;  // 0: 1 GiB on the CPU, --gpu-memory-utilization on the GPU
  int32_t num_blocks = 0;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
  std::string preemption_mode = "recompute";
  double swap_space_gib = 4.0;
  std::string api_key;
  int64_t max_waiting_requests = 0;
  double shutdown_timeout_s = 30.0;  // SIGTERM: in-flight requests' time to finish
};

void add_serve_command(CLI::App& app, ServeOptions& options);
int run_serve(const ServeOptions& options);

}  // namespace strata::cli

#include "serve_command.h"

#include <CLI/CLI.hpp>

#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "core/error.h"
#include "engine_summary.h"
#include "server/async_engine.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

// SIGINT and SIGTERM, blocked in every thread and taken by one thread with sigwait(), so the
// shutdown runs as ordinary code rather than in a signal handler. Block them before any other
// thread starts (threads inherit the mask). SIGUSR1 only wakes the thread when the server ends
// without a signal.
class ShutdownSignals {
 public:
  ShutdownSignals() {
    sigemptyset(&set_);
    for (const int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&set_, sig);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  // The first signal starts server.shutdown(timeout) on a thread of its own; a second one cuts
  // the wait short (vLLM and uvicorn behave so on a second Ctrl-C).
  void watch(server::HttpServer& server, std::chrono::milliseconds timeout) {
    waiter_ = std::thread([this, &server, timeout] {
      int num_signals = 0;
      for (;;) {
        int sig = 0;
        if (sigwait(&set_, &sig) != 0 || sig == SIGUSR1) return;
        if (++num_signals == 1) {
          drainer_ = std::thread([&server, timeout] { server.shutdown(timeout); });
        } else {
          server.shutdown_now();
        }
      }
    });
  }
  // Ends the watch and waits for a shutdown in progress: call it before the server goes.
  void stop() {
    if (waiter_.joinable()) {
      pthread_kill(waiter_.native_handle(), SIGUSR1);
      waiter_.join();
    }
    if (drainer_.joinable()) drainer_.join();
  }
  ~ShutdownSignals() { stop(); }
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

 private:
  sigset_t set_;
  std::thread waiter_, drainer_;
};

}  // namespace

void add_serve_command(CLI::App& app, ServeOptions& o) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI API (HTTP)");
#ifdef STRATA_DEFAULT_MODEL_DIR
  cmd->add_option("--model", o.model_dir, "Hugging Face model directory")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
#else
  cmd->add_option("--model", o.model_dir, "Hugging Face model directory")->required();
#endif
  cmd->add_option("--served-model-name", o.served_model_name, "The model name clients use");
  cmd->add_option("--host", o.host, "Address to listen on");
  cmd->add_option("--port", o.port, "Port to listen on")->check(CLI::Range(0, 65535));
  cmd->add_option("--load-format", o.load_format, "auto (safetensors) or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  cmd->add_option("--threads", o.threads, "Worker threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--device", o.device, "auto (cuda when a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                  "cuda: share of GPU memory for weights, activations and the KV cache")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--block-size", o.block_size, "KV cache block size in tokens")
      ->check(CLI::IsMember({8, 16, 32, 64, 128}));
  cmd->add_option("--kv-cache-memory-bytes", o.kv_cache_memory_bytes,
                  "KV pool size in bytes (default: 1 GiB on the CPU; on the GPU what "
                  "--gpu-memory-utilization leaves)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  cmd->add_option("--num-blocks", o.num_blocks, "KV pool size in blocks (overrides the bytes)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "Most sequences in one step")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "Most tokens in one step")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-model-len", o.max_model_len, "Longest prompt + output (0 = model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
                "Reuse the KV of cached prompt prefixes (default on)");
  cmd->add_option("--preemption-mode", o.preemption_mode, "recompute or swap")
      ->check(CLI::IsMember({"recompute", "swap"}));
  cmd->add_option("--swap-space", o.swap_space_gib, "Host swap space in GiB")
      ->check(CLI::Range(0.0, 1024.0));
  cmd->add_option("--api-key", o.api_key, "Require this bearer key on /v1/* (401 otherwise)");
  cmd->add_option("--shutdown-timeout", o.shutdown_timeout_s,
                  "On SIGTERM/SIGINT, seconds requests in flight get to finish before they are "
                  "cancelled (0 = cancel at once)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--max-waiting-requests", o.max_waiting_requests,
                  "Requests in flight beyond which new ones get 503 (0 = no bound)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
}

int run_serve(const ServeOptions& o) {
  ShutdownSignals signals;  // first: before the engine's threads start
  EngineConfig c;
  c.model_dir = o.model_dir;
  c.dummy_weights = o.load_format == "dummy";
  c.num_threads = o.threads;
  c.device = o.device == "cuda" ? Device::kCuda
             : o.device == "cpu"  ? Device::kCpu
                                  : default_device();
  c.gpu_memory_utilization = o.gpu_memory_utilization;
  c.block_size = o.block_size;
  c.kv_cache_memory_bytes = o.kv_cache_memory_bytes;
  c.num_blocks = o.num_blocks;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_model_len = o.max_model_len;
  c.enable_prefix_caching = o.enable_prefix_caching;
  c.preemption_mode = o.preemption_mode == "swap" ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
  c.swap_space_bytes = static_cast<int64_t>(o.swap_space_gib * double(int64_t{1} << 30));
  Result<std::unique_ptr<Engine>> engine = Engine::create(c);
  if (!engine.ok()) throw Error(engine.status().message());
  print_pool(**engine);
  std::optional<tokenizer::Tokenizer> tok;
  if (std::filesystem::exists(std::filesystem::path(o.model_dir) / "tokenizer.json")) {
    tok.emplace(tokenizer::Tokenizer::load(o.model_dir));
  }
  server::ServedModel model;
  model.name = o.served_model_name.empty()
                   ? std::filesystem::path(o.model_dir).lexically_normal().filename().string()
                   : o.served_model_name;
  if (model.name.empty()) model.name = std::filesystem::path(o.model_dir).parent_path().filename();
  model.vocab_size = (*engine)->vocab_size();
  model.max_model_len = (*engine)->config().max_model_len;
  model.tokenizer = tok ? &*tok : nullptr;
  server::AsyncEngine async(std::move(*engine));
  server::ServerConfig sc;
  sc.host = o.host;
  sc.port = o.port;
  sc.api_key = o.api_key;
  sc.max_waiting_requests = o.max_waiting_requests;
  server::HttpServer http(async, model, sc);
  signals.watch(http, std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1e3)));
  const bool ok = http.listen();
  signals.stop();
  return ok ? 0 : 1;
}

}  // namespace strata::cli

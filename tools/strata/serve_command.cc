#include "serve_command.h"

#include <CLI/CLI.hpp>

#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/mapped_file.h"
#include "engine_summary.h"
#include "server/async_engine.h"
#include "server/http_server.h"
#include "server/tool_call_parser.h"
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
  add_engine_options(*cmd, o);
  add_serve_http_options(*cmd, o.http);
  cmd->add_option("--shutdown-timeout", o.shutdown_timeout_s,
                  "On SIGTERM/SIGINT, seconds requests in flight get to finish before they are "
                  "cancelled (0 = cancel at once)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--prefill-url", o.prefill_urls,
                  "--role decode: the prefill instance's HTTP address (http://HOST:PORT); each "
                  "prompt is prefilled there first and its KV read from its --kv-peer-listen. "
                  "Repeated (with one --kv-peer each, in the same order): a request's "
                  "X-Strata-Prefill-Url header picks one of them (strata route sets it), the "
                  "first by default");
  cmd->add_option("--prefill-timeout", o.prefill_timeout_s,
                  "--role decode: seconds a prompt's prefill on the prefill instance may take "
                  "(then it is computed here)")
      ->check(CLI::Range(0.001, 86400.0));
  cmd->add_option("--max-waiting-requests", o.max_waiting_requests,
                  "Sequences (prompts x n) in flight beyond which new requests get 503 "
                  "(0 = no bound)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_flag("--tokenize-special-in-content", o.tokenize_special_in_content,
                "Chat: encode special-token text in messages (e.g. <|im_start|>) as special "
                "tokens, as the chat template's own; by default it is plain text");
  cmd->add_option("--chat-template", o.chat_template_file,
                  "A Jinja chat template file to use instead of the tokenizer's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tool-call-parser", o.tool_call_parser,
                  "The format tool calls are parsed from (hermes: Qwen and Hermes "
                  "<tool_call> JSON; llama3_json: Llama 3.1 JSON); auto: the one the chat "
                  "template shows; none: requests with tools are refused")
      ->check(CLI::IsMember({"auto", "hermes", "llama3_json", "none"}));
  add_kv_events_options(*cmd, o.kv_events);
}

namespace {

// The served model's tool-call format: the flag's, or the one its chat template writes.
std::optional<server::ToolCallFormat> tool_call_format(const std::string& flag,
                                                       const tokenizer::Tokenizer* tok) {
  if (flag == "none") return std::nullopt;
  if (flag != "auto") return server::tool_call_format_from_name(flag);
  if (tok == nullptr) return std::nullopt;
  return server::detect_tool_call_format(tok->chat_template());
}

}  // namespace

int run_serve(const ServeOptions& o) {
  ShutdownSignals signals;  // first: before the engine's threads start
  server::ServerConfig sc;
  sc.host = o.host;
  sc.port = o.port;
  sc.api_keys = api_keys(o.http);  // a bad key file fails before the model loads
  sc.metrics_require_key = o.http.metrics_require_key;
  sc.limits = http_limits(o.http);
  sc.max_waiting_requests = o.max_waiting_requests;
  if (o.role == "decode" && o.prefill_urls.empty()) {
    throw Error("--role decode needs --prefill-url, the prefill instance's http://HOST:PORT");
  }
  if (o.role != "decode" && !o.prefill_urls.empty()) {
    throw Error("--prefill-url is for --role decode");
  }
  if (o.role == "decode" && !o.kv_peers.empty() && o.prefill_urls.size() != o.kv_peers.size()) {
    throw Error("--role decode: give one --kv-peer per --prefill-url, in the same order (" +
                std::to_string(o.prefill_urls.size()) + " --prefill-url, " +
                std::to_string(o.kv_peers.size()) + " --kv-peer)");
  }
  for (std::string url : o.prefill_urls) {
    while (url.ends_with('/')) url.pop_back();
    if (!url.starts_with("http://")) {
      throw Error("--prefill-url " + url + ": not http://HOST:PORT");
    }
    sc.prefill_urls.push_back(url);
  }
  if (std::set<std::string>(sc.prefill_urls.begin(), sc.prefill_urls.end()).size() !=
      sc.prefill_urls.size()) {
    throw Error("--prefill-url: an instance given twice");
  }
  sc.prefill_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.prefill_timeout_s * 1e3));
  EngineConfig c = engine_config(o);
  apply_kv_events_options(o.kv_events, c);
  Result<std::unique_ptr<Engine>> engine = Engine::create(c);
  if (!engine.ok()) throw Error(engine.status().message());
  print_pool(**engine);
  if (const std::string at = (*engine)->kv_peer_address(); !at.empty()) {
    std::fprintf(stderr, "strata: KV blocks for decode instances on %s (--kv-peer)\n", at.c_str());
  }
  if (!c.kv_events_endpoint.empty()) {
    std::fprintf(stderr, "strata: KV events on %s%s%s\n", c.kv_events_endpoint.c_str(),
                 c.kv_events_replay_endpoint.empty() ? "" : ", replay on ",
                 c.kv_events_replay_endpoint.c_str());
  }
  std::optional<tokenizer::Tokenizer> tok;
  const std::string& tokenizer_dir = o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir;
  if (file_exists(std::filesystem::path(tokenizer_dir) / "tokenizer.json")) {
    tok.emplace(tokenizer::Tokenizer::load(tokenizer_dir));
  }
  if (!o.chat_template_file.empty()) {
    if (!tok) throw Error("--chat-template: the model has no tokenizer (tokenizer.json)");
    const MappedFile source = MappedFile::open(o.chat_template_file);
    tok->set_chat_template(
        std::string(reinterpret_cast<const char*>(source.data()), source.bytes().size()));
  }
  server::ServedModel model;
  model.name = o.served_model_name.empty()
                   ? std::filesystem::path(o.model_dir).lexically_normal().filename().string()
                   : o.served_model_name;
  if (model.name.empty()) model.name = std::filesystem::path(o.model_dir).parent_path().filename();
  model.vocab_size = (*engine)->model().vocab_size;
  model.max_model_len = (*engine)->kv_cache().max_request_tokens;
  model.max_evicting_len = (*engine)->config().max_model_len;
  model.evicts_by_default = (*engine)->config().kv_eviction.policy.value_or(
                                KvEvictionPolicy::kNone) != KvEvictionPolicy::kNone;
  model.tokenizer = tok ? &*tok : nullptr;
  model.special_tokens_in_content = o.tokenize_special_in_content;
  model.tool_call_format = tool_call_format(o.tool_call_parser, model.tokenizer);
  if (model.tool_call_format) {
    std::fprintf(stderr, "strata: tool calls: %s (%s)\n",
                 std::string(server::tool_call_format_name(*model.tool_call_format)).c_str(),
                 o.tool_call_parser == "auto" ? "the chat template's format" : "--tool-call-parser");
  } else {
    std::fprintf(stderr, "strata: tool calls: none (requests with tools are refused; "
                         "--tool-call-parser names a format)\n");
  }
  server::AsyncEngine async(std::move(*engine));
  server::HttpServer http(async, model, sc);
  signals.watch(http, std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1e3)));
  const bool ok = http.listen();
  signals.stop();
  return ok ? 0 : 1;
}

}  // namespace strata::cli

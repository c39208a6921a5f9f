#include "route_command.h"

#include <CLI/CLI.hpp>

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/mapped_file.h"
#include "router/backend_spec.h"
#include "router/router.h"
#include "server/tool_call_parser.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {

void add_route_command(CLI::App& app, RouteOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "route", "Route OpenAI API requests across strata serve instances (prefix-aware)");
#ifdef STRATA_DEFAULT_MODEL_DIR
  cmd->add_option("--model", o.model_dir, "The instances' model directory (its tokenizer)")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
#else
  cmd->add_option("--model", o.model_dir, "The instances' model directory (its tokenizer)")
      ->required();
#endif
  cmd->add_option("--served-model-name", o.served_model_name,
                  "The instances' --served-model-name, if they were given one");
  cmd->add_option("--tokenizer", o.tokenizer_dir, "Tokenizer directory (default: --model)");
  cmd->add_option("--chat-template", o.chat_template_file,
                  "The instances' --chat-template, if they were given one")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--tokenize-special-in-content", o.tokenize_special_in_content,
                "The instances' --tokenize-special-in-content, if they were given it");
  cmd->add_option("--backend", o.backends,
                  "An instance: http://HOST:PORT[,events=tcp://HOST:PORT[,replay=tcp://HOST:PORT]]"
                  " (events: its --kv-events-endpoint; replay: its --kv-events-replay-endpoint)");
  cmd->add_option("--prefill-backend", o.prefill_backends,
                  "A --role prefill instance, as --backend (its events choose it by prefix); "
                  "with --decode-backend instead of --backend");
  cmd->add_option("--decode-backend", o.decode_backends,
                  "A --role decode instance, as --backend, whose --prefill-url list names every "
                  "--prefill-backend's URL as written here (the least loaded gets the request)");
  cmd->add_option("--policy", o.policy,
                  "prefix (the instance caching the longest prefix, balanced against load), "
                  "least-load or round-robin")
      ->check(CLI::IsMember({"prefix", "least-load", "round-robin"}));
  cmd->add_option("--balance-factor", o.balance_factor,
                  "prefix: an instance gets a request for its prefix while its requests in "
                  "flight stay within this x the mean + 1; else the least loaded gets it")
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--cache-salt-secret-file", o.cache_salt_secret_file,
                  "The instances' --cache-salt-secret-file (they use API keys): the router "
                  "derives each key's cache salt as they do")
      ->check(CLI::ExistingFile);
  cmd->add_option("--host", o.host, "Address to listen on");
  cmd->add_option("--port", o.port, "Port to listen on")->check(CLI::Range(0, 65535));
  cmd->add_option("--backend-timeout", o.backend_timeout_s,
                  "Seconds an instance may take to connect and between bytes of its answer")
      ->check(CLI::Range(0.001, 86400.0));
}

int run_route(const RouteOptions& o) {
  sigset_t signals;
  sigemptyset(&signals);
  for (const int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts

  router::RouterConfig rc;
  const bool pools = !o.prefill_backends.empty() || !o.decode_backends.empty();
  if (pools && !o.backends.empty()) {
    throw Error("--backend, or --prefill-backend with --decode-backend: not both");
  }
  if (pools && (o.prefill_backends.empty() || o.decode_backends.empty())) {
    throw Error("--prefill-backend and --decode-backend go together (at least one of each)");
  }
  if (!pools && o.backends.empty()) {
    throw Error("--backend is required (or --prefill-backend and --decode-backend)");
  }
  const auto parse = [](const std::vector<std::string>& in, std::vector<router::BackendSpec>& out) {
    for (const std::string& b : in) {
      Result<router::BackendSpec> spec = router::parse_backend_spec(b);
      if (!spec.ok()) throw Error(spec.status().message());
      out.push_back(std::move(spec).value());
    }
  };
  parse(pools ? o.decode_backends : o.backends, rc.backends);
  parse(o.prefill_backends, rc.prefill_backends);
  rc.policy = *router::policy_from_name(o.policy);
  rc.balance_factor = o.balance_factor;
  rc.host = o.host;
  rc.port = o.port;
  rc.backend_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.backend_timeout_s * 1e3));
  if (!o.cache_salt_secret_file.empty()) {
    std::ifstream in(o.cache_salt_secret_file, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    rc.cache_salt_secret = bytes.str();
    if (!in || rc.cache_salt_secret.empty()) {
      throw Error("--cache-salt-secret-file " + o.cache_salt_secret_file +
                  ": cannot read it, or it is empty");
    }
  }
  std::optional<tokenizer::Tokenizer> tok;
  const std::string& dir = o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir;
  if (file_exists(std::filesystem::path(dir) / "tokenizer.json")) {
    tok.emplace(tokenizer::Tokenizer::load(dir));
  }
  if (!o.chat_template_file.empty()) {
    if (!tok) throw Error("--chat-template: the model has no tokenizer (tokenizer.json)");
    const MappedFile source = MappedFile::open(o.chat_template_file);
    tok->set_chat_template(
        std::string(reinterpret_cast<const char*>(source.data()), source.bytes().size()));
  }
  // The parser's view of the model: prompts are built as the instances build them; limits
  // (vocabulary, context) are the instances' to enforce, so they pass here.
  // The name requests must ask for, as the instances derive it.
  rc.model.name = o.served_model_name.empty()
                      ? std::filesystem::path(o.model_dir).lexically_normal().filename().string()
                      : o.served_model_name;
  if (rc.model.name.empty()) {
    rc.model.name = std::filesystem::path(o.model_dir).parent_path().filename();
  }
  rc.model.vocab_size = std::numeric_limits<int32_t>::max();
  rc.model.max_model_len = int64_t{1} << 40;
  rc.model.tokenizer = tok ? &*tok : nullptr;
  rc.model.special_tokens_in_content = o.tokenize_special_in_content;
  if (tok) rc.model.tool_call_format = server::detect_tool_call_format(tok->chat_template());

  router::Router r(std::move(rc));
  std::thread waiter([&signals, &r] {
    int sig = 0;
    if (sigwait(&signals, &sig) == 0 && sig != SIGUSR1) r.shutdown();
  });
  const bool ok = r.listen();
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  return ok ? 0 : 1;
}

}  // namespace strata::cli

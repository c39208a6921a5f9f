#pragma once
// `strata serve`: the OpenAI-compatible HTTP server (src/server) on one model.

#include <cstdint>
#include <string>

#include "engine_options.h"
#include "kv_events_options.h"
#include "serve_http_options.h"

namespace CLI {
class App;
}

namespace strata::cli {

// The engine flags (--model, --device, --block-size, ...) are EngineOptions'.
struct ServeOptions : EngineOptions {
  std::string served_model_name;  // default: the model directory's name
  std::string host = "127.0.0.1";
  int port = 8000;
  ServeHttpOptions http;
  int64_t max_waiting_requests = 0;
  double shutdown_timeout_s = 30.0;  // SIGTERM: in-flight requests' time to finish
  bool tokenize_special_in_content = false;  // chat: request text may encode special tokens
  std::string chat_template_file;  // replaces the tokenizer's chat template
  std::string tool_call_parser = "auto";  // auto | hermes | llama3_json | none
  std::vector<std::string> prefill_urls;  // --role decode: each prefill instance's http://HOST:PORT
  double prefill_timeout_s = 600.0;
  KvEventsOptions kv_events;
};

void add_serve_command(CLI::App& app, ServeOptions& options);
int run_serve(const ServeOptions& options);

}  // namespace strata::cli

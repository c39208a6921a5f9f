#include "serve_http_options.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"

namespace strata::cli {

void add_serve_http_options(CLI::App& cmd, ServeHttpOptions& o) {
  server::HttpLimits& l = o.limits;
  cmd.add_option("--api-key", o.api_keys,
                 "Require a bearer key on /v1/*, /tokenize and /detokenize (401 otherwise); "
                 "repeat for several keys, each a tenant of the prefix cache of its own");
  cmd.add_option("--api-key-file", o.api_key_file,
                 "A file of API keys, one per line (# comments and blank lines skipped)");
  cmd.add_flag("--metrics-require-api-key", o.metrics_require_key,
               "/metrics needs a key too (by default it is open, as vLLM's)");
  cmd.add_option("--max-request-body-bytes", l.max_body_bytes,
                 "Largest request body, chunked or not (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 34));
  cmd.add_option("--max-header-bytes", l.max_header_bytes,
                 "Largest request head: request line and header fields together (431 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{16} << 20));
  cmd.add_option("--http-read-timeout", o.read_timeout_s,
                 "Seconds a client gets to send a whole request (head and body) once its "
                 "connection is idle; idle keep-alive connections close after it too")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd.add_option("--http-write-timeout", o.write_timeout_s,
                 "Seconds a response write may make no progress before the request is "
                 "cancelled (the client stopped reading)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd.add_option("--max-connections", l.max_connections,
                 "Open connections beyond which new ones get 503 and are closed")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  cmd.add_option("--max-connections-per-client", l.max_connections_per_client,
                 "Open connections from one address beyond which its new ones are closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--max-buffered-body-bytes", l.max_buffered_body_bytes,
                 "Request bodies held in memory at once, over all connections (503 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1} << 20, size_t{1} << 40));
  cmd.add_option("--http-threads", l.num_handler_threads,
                 "Threads that handle requests (0 = --max-num-seqs + 16)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd.add_option("--max-queued-requests", l.max_queued_requests,
                 "Complete requests waiting for a handler thread beyond which new ones get 503")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
}

server::HttpLimits http_limits(const ServeHttpOptions& o) {
  server::HttpLimits l = o.limits;
  l.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.read_timeout_s * 1e3));
  l.write_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.write_timeout_s * 1e3));
  return l;
}

std::vector<std::string> api_keys(const ServeHttpOptions& o) {
  std::vector<std::string> keys = o.api_keys;
  if (!o.api_key_file.empty()) {
    std::optional<MappedFile> file;
    try {
      file = MappedFile::open(o.api_key_file);  // not a directory, a FIFO or /dev/zero
    } catch (const Error& e) {
      throw Error(std::string("cannot read the API key file: ") + e.what());
    }
    const size_t before = keys.size();
    std::istringstream in{std::string(file->text())};
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.empty() || line[0] == '#') continue;
      keys.push_back(line);
    }
    if (keys.size() == before) throw Error("the API key file " + o.api_key_file + " has no key");
  }
  for (const std::string& k : keys) {
    for (const char c : k) {
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
        throw Error("an API key must not contain spaces or control characters");
      }
    }
    if (k.empty()) throw Error("an API key must not be empty");
  }
  return keys;
}

}  // namespace strata::cli

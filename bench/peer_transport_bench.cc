// The peer transport's rate between two processes on this machine (docs/benchmarks.md,
// "Prefill/decode disaggregation"): a child process serves --keys values of --value-bytes each
// from memory (ucx_peer_transport.h's server, the lookup copying each value out as a prefill
// instance's outbox does), and the parent gets them all in one round trip, --iterations times.
// Prints the median GB/s of the values received beside a memcpy of the same bytes between
// buffers already in memory (one core), measured in the same run.
//
// Usage: strata_peer_transport_bench [--keys 32] [--value-bytes 2097152] [--iterations 20]
//                                    [--json]

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "guarded_main.h"
#include "kv/tier_key.h"
#include "kv/ucx_peer_transport.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The child: serves every key with a value of `bytes` bytes until killed; writes its port to fd.
[[noreturn]] void serve(size_t bytes, int fd) {
  const std::string value(bytes, 'v');
  auto server = strata::kv::start_ucx_peer_server(
      "127.0.0.1", 0,
      [&value](std::span<const strata::kv::TierKey> keys, uint16_t /*flags*/,
               std::vector<std::string>& values) {
        for (size_t i = 0; i < keys.size(); ++i) values[i].assign(value);
      });
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().message().c_str());
    _exit(1);
  }
  const std::string address = (*server)->address();
  if (write(fd, address.data(), address.size()) != static_cast<ssize_t>(address.size())) _exit(1);
  close(fd);
  for (;;) pause();
}

int run(int argc, char** argv) {
  CLI::App app("The peer transport's rate between two processes on this machine");
  size_t keys = 32;
  size_t value_bytes = size_t{2} << 20;
  int iterations = 20;
  bool json = false;
  app.add_option("--keys", keys, "Values per round trip")->check(CLI::Range(1, 1024));
  app.add_option("--value-bytes", value_bytes, "Bytes of each value")
      ->check(CLI::Range(size_t{1}, size_t{8} << 20));
  app.add_option("--iterations", iterations, "Round trips measured")->check(CLI::Range(1, 100000));
  app.add_flag("--json", json, "One JSON object instead of a table");
  CLI11_PARSE(app, argc, argv);

  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // not left serving if this process dies
    close(pipe_fds[0]);
    serve(value_bytes, pipe_fds[1]);
  }
  close(pipe_fds[1]);
  char buf[256] = {};
  const ssize_t n = read(pipe_fds[0], buf, sizeof(buf) - 1);
  close(pipe_fds[0]);
  const auto stop_child = [child] {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  };
  if (n <= 0) {
    stop_child();
    throw std::runtime_error("the server process did not start");
  }
  auto client = strata::kv::connect_ucx_peer(std::string(buf, static_cast<size_t>(n)),
                                             std::chrono::milliseconds(10000));
  if (!client.ok()) {
    stop_child();
    throw std::runtime_error(client.status().message());
  }
  std::vector<strata::kv::TierKey> ks(keys);
  for (size_t i = 0; i < keys; ++i) ks[i].ns = i;
  std::vector<std::string> values;
  std::vector<double> rates;
  for (int it = -2; it < iterations; ++it) {  // two unmeasured round trips first
    const auto start = Clock::now();
    const strata::Status s = (*client)->get(ks, values);
    const double seconds = seconds_since(start);
    if (!s.ok()) {
      stop_child();
      throw std::runtime_error(s.message());
    }
    for (const std::string& v : values) {
      if (v.size() != value_bytes) {
        stop_child();
        throw std::runtime_error("a value came back short");
      }
    }
    if (it >= 0) rates.push_back(static_cast<double>(keys * value_bytes) / seconds / 1e9);
  }
  client->reset();
  stop_child();
  // The same bytes copied between buffers already in memory.
  std::vector<char> from(keys * value_bytes, 'v'), to(keys * value_bytes, 0);
  std::vector<double> copies;
  for (int it = 0; it < 5; ++it) {
    const auto start = Clock::now();
    std::memcpy(to.data(), from.data(), to.size());
    copies.push_back(static_cast<double>(to.size()) / seconds_since(start) / 1e9);
  }
  const double rate = median(rates), copy = median(copies);
  if (json) {
    std::printf("%s\n", nlohmann::json{{"keys", keys},
                                       {"value_bytes", value_bytes},
                                       {"iterations", iterations},
                                       {"gb_per_s", rate},
                                       {"memcpy_gb_per_s", copy},
                                       {"of_memcpy", rate / copy}}
                            .dump()
                            .c_str());
  } else {
    std::printf("| values x bytes | GB/s (median of %d) | memcpy GB/s | of memcpy |\n", iterations);
    std::printf("|---|---|---|---|\n| %zu x %zu | %.2f | %.1f | %.3f |\n", keys, value_bytes, rate,
                copy, rate / copy);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_peer_transport_bench", run, argc, argv);
}

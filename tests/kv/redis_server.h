#pragma once
// A real redis-server for tests (Debian's redis-server, installed by scripts/install_deps.sh): a
// child process on a free loopback port, no persistence, DEBUG enabled (to make it slow on
// purpose), stopped and started again on the same port at will, or a Redis Cluster node.
// start() waits until it answers PING.

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kv/redis_client.h"

extern char** environ;

namespace strata::kv::test_util {

// Whether a loopback port can be bound now (0: the kernel picks one); the port bound, or 0.
inline int bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  int got = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    got = ntohs(a.sin_port);
  }
  ::close(fd);
  return got;
}

// A port nothing listens on now; for a cluster node, one whose bus port (port + 10000) is free
// and below 65536 too.
inline int free_port(bool cluster = false) {
  for (int tries = 0; tries < 200; ++tries) {
    const int p = bindable(0);
    if (!cluster) return p;
    const int q = 20000 + (p % 30000);  // q + 10000 < 60000
    if (bindable(q) == q && bindable(q + 10000) == q + 10000) return q;
  }
  return 0;
}

class RedisServer {
 public:
  // cluster: a Redis Cluster node (its nodes file in /tmp, named by the port).
  explicit RedisServer(bool cluster = false) : port_(free_port(cluster)), cluster_(cluster) {}
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  RedisEndpoint endpoint() const { return RedisEndpoint{"127.0.0.1", port_, 0}; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // False when redis-server is missing or does not answer within 5 s.
  bool start() {
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no", "--daemonize", "no",
                                     "--enable-debug-command", "yes", "--logfile", "/dev/null",
                                     "--dir", "/tmp"};
    if (cluster_) {
      const std::string nodes = "/tmp/strata-redis-nodes-" + port + ".conf";
      ::unlink(nodes.c_str());
      for (const char* a : {"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                            "--cluster-config-file"}) {
        args.emplace_back(a);
      }
      args.push_back(nodes);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      return false;
    }
    RedisClient probe(endpoint(), RedisClientOptions{.timeout = std::chrono::milliseconds(200),
                                                     .backoff = std::chrono::milliseconds(1),
                                                     .max_backoff = std::chrono::milliseconds(1)});
    const std::string_view ping[] = {"PING"};
    for (int i = 0; i < 250; ++i) {
      if (probe.command(ping).ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The number after `field` (e.g. "keyspace_hits:", "cmdstat_set:calls=") in INFO `section`;
  // -1 when the server does not answer or does not list it (a command never run).
  int64_t info_counter(std::string_view section, std::string_view field) const {
    RedisClient c(endpoint());
    const std::string_view args[] = {"INFO", section};
    const Result<std::string> reply = c.command(args);
    if (!reply.ok()) return -1;
    const size_t at = reply->find(field);
    return at == std::string::npos ? -1 : std::stoll(reply->substr(at + field.size()));
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  int port_;
  bool cluster_;
  pid_t pid_ = -1;
};

}  // namespace strata::kv::test_util

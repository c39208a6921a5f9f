#include "server/connections.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

namespace strata::server {
namespace {

// The local port of a connected TCP socket, or -1 for anything else (files, pipes, listeners).
int connected_local_port(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return -1;
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return -1;
  if (local.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  }
  if (local.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
  }
  return -1;
}

}  // namespace

int shutdown_connections_on_port(int port) {
  std::vector<int> fds;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      const int fd = std::atoi(e->d_name);
      if (fd != dirfd(dir)) fds.push_back(fd);
    }
    closedir(dir);
  }
  int n = 0;
  for (const int fd : fds) {
    if (connected_local_port(fd) != port) continue;
    n += ::shutdown(fd, SHUT_RDWR) == 0 ? 1 : 0;
  }
  return n;
}

}  // namespace strata::server

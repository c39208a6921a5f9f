#pragma once
// Ending the server's idle keep-alive connections at shutdown.
//
// Why: cpp-httplib 0.11 (Debian 12's) keeps no list of the connections it accepted, and a handler
// thread waiting for the next request on an idle keep-alive connection only notices a stopped
// server after its keep-alive timeout (5 s). Once a graceful shutdown has no request left in
// flight, shutting these sockets down lets the handler threads, and so the process, end at once.

namespace strata::server {

// Shuts down (SHUT_RDWR, not close: cpp-httplib still owns the descriptors) every connected TCP
// socket of this process whose local port is `port`. Linux: finds them through /proc/self/fd.
// Returns how many it shut down.
int shutdown_connections_on_port(int port);

}  // namespace strata::server

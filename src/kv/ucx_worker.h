#pragma once
// UcxWorker: a UCP context (Debian's UCX, libucx-dev) with one worker on it, for the peer
// transport (ucx_peer_transport.h): Active Messages and wakeup, so an idle thread sleeps on the
// worker's event fd instead of spinning. Also the socket-address helpers both ends share.
//
// Owns the context and the worker; destroying it destroys both (endpoints and listeners on the
// worker must be closed first). Single-threaded (UCS_THREAD_MODE_SINGLE): one thread at a time
// calls anything but signal(), which any thread may call.

#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>

#include <ucp/api/ucp.h>

#include "core/status.h"

namespace strata::kv {

// Which transports a worker may use. kDefault is UCX's own choice (and UCX_* variables); kTcp
// pins UCX_TLS to tcp, the fallback when the default cannot start (a container where shared
// memory or a device UCX found cannot be opened).
enum class UcxTransports { kDefault, kTcp };

// The error handling every peer endpoint asks for; the two ends must agree. Not
// UCP_ERR_HANDLING_MODE_PEER: UCX 1.13 offers no shared-memory transport under it, so two
// processes on one host would talk over loopback TCP (1.0-1.1 GB/s for 2 MiB values on the 2-core
// CPU, against 7.2-7.4 GB/s over sysv and cma: strata_peer_transport_bench). A peer that dies is
// still reported (a reset connection fails the get, as killing the server mid-transfer shows), and
// every get is bounded by the client's timeout whatever UCX reports.
inline constexpr ucp_err_handling_mode_t kPeerErrorMode = UCP_ERR_HANDLING_MODE_NONE;

class UcxWorker {
 public:
  static Result<std::unique_ptr<UcxWorker>> create(UcxTransports transports);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h get() const { return worker_; }
  // The longest Active Message header this worker sends (about 8 KiB).
  size_t max_am_header() const { return max_am_header_; }

  // One round of waiting: progresses the worker; when that found nothing to do, sleeps on the
  // event fd until an event, signal() or `wait` (forever when negative). The caller re-checks what
  // it waits for after each round.
  void progress_or_sleep(std::chrono::milliseconds wait);
  // Wakes a progress_or_sleep sleeping on another thread.
  void signal();
  // Calls cb(arg, ...) for each Active Message with this id that reaches the worker.
  Status set_am_handler(unsigned id, ucp_am_recv_callback_t cb, void* arg);
  // Closes ep, forced (nothing more is sent or received on it: its operations complete with an
  // error), progressing the worker up to `wait` for UCX to finish.
  void close(ucp_ep_h ep, std::chrono::milliseconds wait);

 private:
  UcxWorker(ucp_context_h context, ucp_worker_h worker, int event_fd, size_t max_am_header)
      : context_(context), worker_(worker), event_fd_(event_fd), max_am_header_(max_am_header) {}

  ucp_context_h context_;
  ucp_worker_h worker_;
  int event_fd_;  // the worker's, owned by UCX
  size_t max_am_header_;
};

// How long a destructor waits for UCX to close an endpoint before going on regardless.
inline constexpr std::chrono::milliseconds kUcxCloseWait{1000};

// Starting UCX (a context and worker, and a server's listener): make(kDefault), and make(kTcp)
// when that fails for any reason but bad arguments. UCX's default transport choice can fail to
// start in a container (a shared-memory or device transport it found but cannot open) where TCP
// still works; only then is UCX_TLS pinned, so a machine with RDMA keeps it.
template <typename T, typename Make>
Result<T> with_tcp_fallback(Make make) {
  Result<T> first = make(UcxTransports::kDefault);
  if (first.ok() || first.status().code() == StatusCode::kInvalidArgument) return first;
  return make(UcxTransports::kTcp);
}

// A UCX status as ours: Unavailable for what a dead or absent peer causes, Internal otherwise.
Status ucx_status(ucs_status_t s, const std::string& what);

// host:port, or [v6 host]:port, resolved (numeric or by name) into *addr. InvalidArgument naming
// what is wrong otherwise. passive: an empty host means any address (a listener's bind).
Status parse_socket_address(const std::string& host, int port, bool passive, sockaddr_storage* addr,
                            socklen_t* len);
// "host:port" (or "[v6 host]:port") split; any_port takes port 0 too (a listener's any free port).
Status split_host_port(const std::string& address, std::string* host, int* port,
                       bool any_port = false);

}  // namespace strata::kv

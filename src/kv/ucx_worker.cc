#include "kv/ucx_worker.h"

#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <utility>

namespace strata::kv {
namespace {

// ucp_config_t, released at scope exit.
struct ConfigGuard {
  ucp_config_t* config = nullptr;
  ~ConfigGuard() {
    if (config != nullptr) ucp_config_release(config);
  }
};

}  // namespace

Result<std::unique_ptr<UcxWorker>> UcxWorker::create(UcxTransports transports) {
  // UCX's own configuration (its UCX_* variables), with TLS pinned for the fallback.
  ConfigGuard cfg;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &cfg.config);
  if (s != UCS_OK) return ucx_status(s, "ucp_config_read");
  switch (transports) {
    case UcxTransports::kDefault:
      break;
    case UcxTransports::kTcp:
      s = ucp_config_modify(cfg.config, "TLS", "tcp");
      if (s != UCS_OK) return ucx_status(s, "ucp_config_modify(TLS=tcp)");
      break;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "strata-peer";
  ucp_context_h context = nullptr;
  s = ucp_init(&params, cfg.config, &context);
  if (s != UCS_OK) return ucx_status(s, "ucp_init");

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time, not always the same one: a decode instance's confirmations of region
  // blocks run on each promotion's own thread (KvTiers::start_confirm), one after another.
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  s = ucp_worker_create(context, &wp, &worker);
  if (s != UCS_OK) {
    ucp_cleanup(context);
    return ucx_status(s, "ucp_worker_create");
  }
  int fd = -1;
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  s = ucp_worker_get_efd(worker, &fd);
  if (s == UCS_OK) s = ucp_worker_query(worker, &attr);
  if (s != UCS_OK) {
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return ucx_status(s, "ucp_worker_get_efd / ucp_worker_query");
  }
  return std::unique_ptr<UcxWorker>(new UcxWorker(context, worker, fd, attr.max_am_header));
}

UcxWorker::~UcxWorker() {
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

void UcxWorker::progress_or_sleep(std::chrono::milliseconds wait) {
  if (ucp_worker_progress(worker_) != 0) return;
  // Arming fails with BUSY when events arrived since the progress: go round again.
  const ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_ERR_BUSY) return;
  pollfd p{event_fd_, POLLIN, 0};
  // A worker that cannot be armed is polled with a short sleep instead of spinning.
  const int ms = s != UCS_OK        ? 1
                 : wait.count() < 0 ? -1
                                    : static_cast<int>(std::min<int64_t>(wait.count(), 60'000));
  (void)::poll(&p, 1, ms);  // EINTR, or the time passing: the caller checks again
}

void UcxWorker::signal() { (void)ucp_worker_signal(worker_); }

Status UcxWorker::set_am_handler(unsigned id, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t h{};
  h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG;
  h.id = id;
  h.cb = cb;
  h.arg = arg;
  const ucs_status_t s = ucp_worker_set_am_recv_handler(worker_, &h);
  if (s != UCS_OK) return ucx_status(s, "ucp_worker_set_am_recv_handler");
  return Status::Ok();
}

void UcxWorker::close(ucp_ep_h ep, std::chrono::milliseconds wait) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &p);
  if (!UCS_PTR_IS_PTR(req)) return;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (ucp_request_check_status(req) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    progress_or_sleep(std::chrono::milliseconds(1));
  }
  ucp_request_free(req);
}

Status ucx_status(ucs_status_t s, const std::string& what) {
  const std::string m = what + ": " + ucs_status_string(s);
  switch (s) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_CANCELED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
      return Status::Unavailable(m);
    default:
      return Status::Internal(m);
  }
}

Status split_host_port(const std::string& address, std::string* host, int* port, bool any_port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("peer address '" + address + "' is not host:port");
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = address.substr(colon + 1);
  int n = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
  if (h.empty() || p.empty() || ec != std::errc() || end != p.data() + p.size() ||
      n < (any_port ? 0 : 1) || n > 65535) {
    return Status::InvalidArgument("peer address '" + address + "' is not host:port");
  }
  *host = std::move(h);
  *port = n;
  return Status::Ok();
}

Status parse_socket_address(const std::string& host, int port, bool passive, sockaddr_storage* addr,
                            socklen_t* len) {
  if (port < 0 || port > 65535) {
    return Status::InvalidArgument("port " + std::to_string(port) + " out of range");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  std::memcpy(addr, found->ai_addr, found->ai_addrlen);
  *len = found->ai_addrlen;
  ::freeaddrinfo(found);
  return Status::Ok();
}

}  // namespace strata::kv

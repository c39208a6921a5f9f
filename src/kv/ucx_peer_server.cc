// The peer transport's server over UCX (ucx_peer_transport.h): a listener, the endpoints of the
// clients it accepted, and one progress thread that serves their requests with the lookup.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

#include "kv/peer_frames.h"
#include "kv/ucx_peer_transport.h"
#include "kv/ucx_worker.h"
#include "kv/value_buffer_pool.h"

namespace strata::kv {
namespace {

using std::chrono::milliseconds;

std::string format_address(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

class UcxPeerServer final : public PeerServer {
 public:
  static Result<std::unique_ptr<PeerServer>> start(const std::string& bind_host, int port,
                                                   const PeerBlockLookup& lookup,
                                                   UcxTransports transports);
  ~UcxPeerServer() override;
  UcxPeerServer(const UcxPeerServer&) = delete;
  UcxPeerServer& operator=(const UcxPeerServer&) = delete;
  std::string address() const override { return address_; }

 private:
  // One response on its way: its buffers live until UCX reports the send done.
  struct Response {
    UcxPeerServer* server = nullptr;
    uint64_t seq = 0;
    std::string head;
    std::vector<std::string> values;
    std::vector<ucp_dt_iov_t> iov;
  };
  struct Incoming {
    ucp_ep_h ep;
    std::string frame;
  };

  UcxPeerServer(std::unique_ptr<UcxWorker> worker, PeerBlockLookup lookup)
      : worker_(std::move(worker)), lookup_(std::move(lookup)) {}
  Status listen(const sockaddr_storage& addr, socklen_t len, const std::string& bind_host);

  static void on_connection(ucp_conn_request_h request, void* arg);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_request(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  static void on_sent(void* request, ucs_status_t status, void* user_data);

  void run();
  void accept_connections();
  void serve(ucp_ep_h ep, std::string_view frame);
  void send(ucp_ep_h ep, std::unique_ptr<Response> r);
  void send_error(ucp_ep_h ep, uint64_t request_id, uint32_t num_keys, PeerFrameStatus status);
  void finish(uint64_t seq);  // a response sent (or failed): its strings back to the pool
  void close_failed();

  std::unique_ptr<UcxWorker> worker_;
  PeerBlockLookup lookup_;
  ucp_listener_h listener_ = nullptr;
  std::string address_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  // The progress thread's (the destructor's once it is joined). Callbacks only queue work here;
  // run() does it between progress rounds, outside UCX's callbacks.
  std::vector<ucp_conn_request_h> connecting_;
  std::unordered_set<ucp_ep_h> eps_;  // open and healthy
  std::vector<ucp_ep_h> failed_;      // to close
  std::vector<Incoming> incoming_;
  std::unordered_map<uint64_t, std::unique_ptr<Response>> sending_;
  uint64_t next_seq_ = 0;
  ValueBufferPool pool_{kMaxPeerResponseBytes};
};

Result<std::unique_ptr<PeerServer>> UcxPeerServer::start(const std::string& bind_host, int port,
                                                         const PeerBlockLookup& lookup,
                                                         UcxTransports transports) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  STRATA_RETURN_IF_ERROR(parse_socket_address(bind_host, port, /*passive=*/true, &addr, &len));
  Result<std::unique_ptr<UcxWorker>> worker = UcxWorker::create(transports);
  if (!worker.ok()) return worker.status();
  std::unique_ptr<UcxPeerServer> server(new UcxPeerServer(std::move(worker).value(), lookup));
  STRATA_RETURN_IF_ERROR(
      server->worker_->set_am_handler(kPeerRequestAmId, &UcxPeerServer::on_request, server.get()));
  STRATA_RETURN_IF_ERROR(server->listen(addr, len, bind_host));
  UcxPeerServer* raw = server.get();
  server->thread_ = std::thread([raw] { raw->run(); });
  return std::unique_ptr<PeerServer>(std::move(server));
}

Status UcxPeerServer::listen(const sockaddr_storage& addr, socklen_t len,
                             const std::string& bind_host) {
  ucp_listener_params_t p{};
  p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  p.sockaddr.addrlen = len;
  p.conn_handler.cb = &UcxPeerServer::on_connection;
  p.conn_handler.arg = this;
  ucs_status_t s = ucp_listener_create(worker_->get(), &p, &listener_);
  if (s != UCS_OK) {
    listener_ = nullptr;
    return ucx_status(s, "ucp_listener_create on " + format_address(bind_host, 0));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  s = ucp_listener_query(listener_, &attr);
  if (s != UCS_OK) return ucx_status(s, "ucp_listener_query");
  const int port = attr.sockaddr.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr)->sin6_port)
                       : ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  // A wildcard bind is reachable by the host's name, not by the wildcard.
  std::string host = bind_host;
  if (host.empty() || host == "0.0.0.0" || host == "::") {
    char name[256] = {};
    host = ::gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  address_ = format_address(host, port);
  return Status::Ok();
}

UcxPeerServer::~UcxPeerServer() {
  if (thread_.joinable()) {
    stopping_.store(true);
    worker_->signal();
    thread_.join();
  }
  if (listener_ != nullptr) {
    for (const ucp_conn_request_h c : connecting_) (void)ucp_listener_reject(listener_, c);
    ucp_listener_destroy(listener_);
  }
  // Closing progresses the worker, whose callbacks edit these: close from a copy.
  std::vector<ucp_ep_h> open(eps_.begin(), eps_.end());
  open.insert(open.end(), failed_.begin(), failed_.end());
  eps_.clear();
  failed_.clear();
  for (const ucp_ep_h ep : open) worker_->close(ep, kUcxCloseWait);
  // Responses still sending are freed after the worker, which holds pointers into them.
  worker_.reset();
  sending_.clear();
}

void UcxPeerServer::run() {
  while (!stopping_.load()) {
    worker_->progress_or_sleep(milliseconds(-1));
    accept_connections();
    std::vector<Incoming> work;
    work.swap(incoming_);
    for (const Incoming& in : work) {
      if (eps_.contains(in.ep)) serve(in.ep, in.frame);
    }
    close_failed();
  }
}

void UcxPeerServer::on_connection(ucp_conn_request_h request, void* arg) {
  static_cast<UcxPeerServer*>(arg)->connecting_.push_back(request);
}

void UcxPeerServer::accept_connections() {
  for (const ucp_conn_request_h request : connecting_) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.conn_request = request;
    p.err_mode = kPeerErrorMode;
    p.err_handler.cb = &UcxPeerServer::on_ep_error;
    p.err_handler.arg = this;
    ucp_ep_h ep = nullptr;
    // A connection UCX cannot accept is rejected by UCX itself; the client sees it fail.
    if (ucp_ep_create(worker_->get(), &p, &ep) == UCS_OK) eps_.insert(ep);
  }
  connecting_.clear();
}

void UcxPeerServer::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t /*status*/) {
  auto* self = static_cast<UcxPeerServer*>(arg);
  // A client gone: its endpoint is closed after this progress round.
  if (self->eps_.erase(ep) != 0) self->failed_.push_back(ep);
}

void UcxPeerServer::close_failed() {
  // Closing progresses the worker, whose error callback appends to failed_: close from a copy.
  std::vector<ucp_ep_h> closing;
  closing.swap(failed_);
  for (const ucp_ep_h ep : closing) worker_->close(ep, kUcxCloseWait);
}

ucs_status_t UcxPeerServer::on_request(void* arg, const void* /*header*/, size_t /*header_length*/,
                                       void* data, size_t length,
                                       const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxPeerServer*>(arg);
  // Clients send requests eagerly (they are small); a rendezvous one is refused, which fails the
  // sender's send with this status, without receiving its bytes.
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) return UCS_ERR_UNSUPPORTED;
  const bool has_reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0;
  if (!has_reply_ep || !self->eps_.contains(param->reply_ep)) return UCS_OK;
  if (length > kPeerRequestHeaderBytes + kMaxPeerKeys * kPeerKeyBytes) return UCS_OK;
  // Copied (a few KiB) so the lookup runs outside the callback, which must stay short.
  std::string frame;
  if (length != 0) frame.assign(static_cast<const char*>(data), length);
  self->incoming_.push_back({param->reply_ep, std::move(frame)});
  return UCS_OK;
}

void UcxPeerServer::serve(ucp_ep_h ep, std::string_view frame) {
  Result<PeerRequest> req = decode_peer_request(frame);
  if (!req.ok()) {
    if (const std::optional<uint64_t> id = peek_peer_request_id(frame)) {
      send_error(ep, *id, 0, PeerFrameStatus::kBadRequest);
    }
    return;
  }
  const uint64_t id = req->request_id;
  const auto num_keys = static_cast<uint32_t>(req->keys.size());
  auto r = std::make_unique<Response>();
  r->values.resize(num_keys);
  // Empty, with the capacity of earlier responses' values: a lookup assigning into them reuses it.
  for (std::string& v : r->values) {
    v = pool_.take();
    v.clear();
  }
  bool looked_up = true;
  try {
    lookup_(req->keys, req->flags, r->values);
  } catch (...) {  // the contract says it does not throw; a server thread must not die of it
    looked_up = false;
  }
  PeerFrameStatus refusal = PeerFrameStatus::kOk;
  std::vector<uint32_t> lengths;
  if (!looked_up || r->values.size() != num_keys) {
    refusal = PeerFrameStatus::kLookupFailed;
  } else if (peer_value_lengths(r->values, lengths) != PeerFrameStatus::kOk) {
    refusal = PeerFrameStatus::kTooLarge;
  } else {
    r->head = encode_peer_response_head(id, lengths);
    if (r->head.size() > worker_->max_am_header()) refusal = PeerFrameStatus::kTooLarge;
  }
  if (refusal != PeerFrameStatus::kOk) {
    pool_.put_all(r->values);
    return send_error(ep, id, num_keys, refusal);
  }
  for (std::string& v : r->values) {
    if (!v.empty()) r->iov.push_back(ucp_dt_iov_t{v.data(), v.size()});
  }
  send(ep, std::move(r));
}

void UcxPeerServer::send_error(ucp_ep_h ep, uint64_t request_id, uint32_t num_keys,
                               PeerFrameStatus status) {
  auto r = std::make_unique<Response>();
  r->head = encode_peer_error_head(request_id, num_keys, status);
  send(ep, std::move(r));
}

void UcxPeerServer::send(ucp_ep_h ep, std::unique_ptr<Response> r) {
  r->server = this;
  r->seq = next_seq_++;
  Response* raw = r.get();
  const uint64_t seq = r->seq;
  sending_.emplace(seq, std::move(r));
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = &UcxPeerServer::on_sent;
  p.user_data = raw;
  p.flags = 0;  // UCX picks eager or rendezvous by size
  const void* buffer = nullptr;
  size_t count = 0;
  if (raw->iov.empty()) {
    p.datatype = ucp_dt_make_contig(1);
  } else {
    p.datatype = ucp_dt_make_iov();
    buffer = raw->iov.data();
    count = raw->iov.size();
  }
  const ucs_status_ptr_t req =
      ucp_am_send_nbx(ep, kPeerResponseAmId, raw->head.data(), raw->head.size(), buffer, count, &p);
  // Done at once, or failed (the client then times out or sees its connection fail).
  if (!UCS_PTR_IS_PTR(req)) finish(seq);
}

void UcxPeerServer::on_sent(void* request, ucs_status_t /*status*/, void* user_data) {
  auto* r = static_cast<Response*>(user_data);
  ucp_request_free(request);
  r->server->finish(r->seq);
}

void UcxPeerServer::finish(uint64_t seq) {
  const auto it = sending_.find(seq);
  if (it == sending_.end()) return;
  pool_.put_all(it->second->values);
  sending_.erase(it);
}

}  // namespace

Result<std::unique_ptr<PeerServer>> start_ucx_peer_server(const std::string& bind_host, int port,
                                                          PeerBlockLookup lookup) {
  if (!lookup) return Status::InvalidArgument("a peer server needs a lookup");
  return with_tcp_fallback<std::unique_ptr<PeerServer>>(
      [&](UcxTransports t) { return UcxPeerServer::start(bind_host, port, lookup, t); });
}

}  // namespace strata::kv

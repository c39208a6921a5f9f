// The peer transport's client over UCX (ucx_peer_transport.h): one endpoint to one server,
// driven by the thread that calls get().

#include <chrono>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

#include "kv/peer_frames.h"
#include "kv/ucx_peer_transport.h"
#include "kv/ucx_worker.h"
#include "kv/value_buffer_pool.h"

namespace strata::kv {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class UcxPeerClient final : public PeerClient {
 public:
  static Result<std::unique_ptr<PeerClient>> connect(const sockaddr_storage& addr, socklen_t len,
                                                     const std::string& address,
                                                     milliseconds timeout);
  ~UcxPeerClient() override;
  UcxPeerClient(const UcxPeerClient&) = delete;
  UcxPeerClient& operator=(const UcxPeerClient&) = delete;
  Status get(std::span<const TierKey> keys, std::vector<std::string>& values) override {
    return get_flagged(keys, 0, values);
  }
  Status get_flagged(std::span<const TierKey> keys, uint16_t flags,
                     std::vector<std::string>& values) override;

 private:
  // One get's request and answer. UCX holds pointers into it while its send or its receive is in
  // flight; a get that gives up then leaves it in abandoned_ until UCX is done.
  struct Get {
    uint64_t id = 0;
    size_t num_keys = 0;
    std::string request;
    bool sending = false;
    bool receiving = false;
    bool answered = false;
    Status status;
    std::vector<std::string> values;
    std::vector<ucp_dt_iov_t> iov;
    bool busy() const { return sending || receiving; }
  };

  UcxPeerClient(std::unique_ptr<UcxWorker> worker, std::string address, milliseconds timeout)
      : worker_(std::move(worker)), address_(std::move(address)), timeout_(timeout) {}
  Status open(const sockaddr_storage& addr, socklen_t len);
  Status send_request(Get& g);
  Status receive(Get& g, const PeerResponseHead& head, void* data, size_t length, bool rndv);
  void retire();

  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_response(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  static void on_sent(void* request, ucs_status_t status, void* user_data);
  static void on_received(void* request, ucs_status_t status, size_t length, void* user_data);

  std::unique_ptr<UcxWorker> worker_;
  std::string address_;
  milliseconds timeout_;
  ucp_ep_h ep_ = nullptr;
  Status failure_;  // set once the connection failed
  uint64_t next_id_ = 1;
  std::unique_ptr<Get> current_;
  std::vector<std::unique_ptr<Get>> abandoned_;
  ValueBufferPool pool_{kMaxPeerResponseBytes};  // the caller's old values, received into again
};

Result<std::unique_ptr<PeerClient>> UcxPeerClient::connect(const sockaddr_storage& addr,
                                                           socklen_t len,
                                                           const std::string& address,
                                                           milliseconds timeout) {
  // The fallback covers starting UCX only: a failed connection is the peer's, the same over TCP
  // (the connection is always made over a TCP socket, whatever carries the data after).
  Result<std::unique_ptr<UcxWorker>> worker =
      with_tcp_fallback<std::unique_ptr<UcxWorker>>(&UcxWorker::create);
  if (!worker.ok()) return worker.status();
  std::unique_ptr<UcxPeerClient> client(
      new UcxPeerClient(std::move(worker).value(), address, timeout));
  STRATA_RETURN_IF_ERROR(client->open(addr, len));
  return std::unique_ptr<PeerClient>(std::move(client));
}

Status UcxPeerClient::open(const sockaddr_storage& addr, socklen_t len) {
  STRATA_RETURN_IF_ERROR(
      worker_->set_am_handler(kPeerResponseAmId, &UcxPeerClient::on_response, this));
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                 UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  p.sockaddr.addrlen = len;
  p.err_mode = kPeerErrorMode;
  p.err_handler.cb = &UcxPeerClient::on_ep_error;
  p.err_handler.arg = this;
  const ucs_status_t s = ucp_ep_create(worker_->get(), &p, &ep_);
  if (s != UCS_OK) {
    ep_ = nullptr;
    return ucx_status(s, "connecting to peer " + address_);
  }
  // The connection is made in the background; an empty round trip proves a server answers.
  std::vector<std::string> none;
  return get({}, none);
}

UcxPeerClient::~UcxPeerClient() {
  if (ep_ != nullptr) worker_->close(ep_, kUcxCloseWait);
  // Gets UCX may still point into are freed after the worker (members die after this body).
  worker_.reset();
}

Status UcxPeerClient::get_flagged(std::span<const TierKey> keys, uint16_t flags,
                                  std::vector<std::string>& values) {
  // The caller's vector is overwritten: its strings' buffers receive this get's values.
  pool_.put_all(values);
  values.resize(keys.size());
  if (keys.size() > kMaxPeerKeys) {
    return Status::InvalidArgument("a peer get asks for at most " + std::to_string(kMaxPeerKeys) +
                                   " keys, not " + std::to_string(keys.size()));
  }
  if (!failure_.ok()) return failure_;
  std::erase_if(abandoned_, [](const std::unique_ptr<Get>& g) { return !g->busy(); });
  current_ = std::make_unique<Get>();
  Get& g = *current_;
  g.id = next_id_++;
  g.num_keys = keys.size();
  encode_peer_request(g.id, keys, g.request, flags);
  Status s = send_request(g);
  const Clock::time_point deadline = Clock::now() + timeout_;
  while (s.ok() && !g.answered && failure_.ok()) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      s = Status::Unavailable("peer " + address_ + " did not answer within " +
                              std::to_string(timeout_.count()) + " ms");
      break;
    }
    worker_->progress_or_sleep(left);
  }
  if (s.ok()) s = g.answered ? g.status : failure_;
  if (s.ok()) values.swap(g.values);
  if (!g.busy()) pool_.put_all(g.values);
  retire();
  return s;
}

Status UcxPeerClient::send_request(Get& g) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = &UcxPeerClient::on_sent;
  p.user_data = &g;
  p.datatype = ucp_dt_make_contig(1);
  // REPLY: the server answers on this connection's endpoint. EAGER: the server takes requests
  // only eagerly (it refuses rendezvous ones rather than posting receives for a client's sizes).
  p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  const ucs_status_ptr_t req =
      ucp_am_send_nbx(ep_, kPeerRequestAmId, nullptr, 0, g.request.data(), g.request.size(), &p);
  if (UCS_PTR_IS_ERR(req)) {
    failure_ =
        Status::Unavailable("peer " + address_ + ": " + ucs_status_string(UCS_PTR_STATUS(req)));
    return failure_;
  }
  g.sending = req != nullptr;
  return Status::Ok();
}

void UcxPeerClient::retire() {
  if (current_->busy()) abandoned_.push_back(std::move(current_));
  current_.reset();
}

void UcxPeerClient::on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* self = static_cast<UcxPeerClient*>(arg);
  self->failure_ = Status::Unavailable("connection to peer " + self->address_ +
                                       " failed: " + ucs_status_string(status));
}

ucs_status_t UcxPeerClient::on_response(void* arg, const void* header, size_t header_length,
                                        void* data, size_t length,
                                        const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxPeerClient*>(arg);
  Get* g = self->current_.get();
  // Nothing waits for it (an answer to a get that gave up): dropped. A rendezvous dropped so
  // completes the server's send without moving its values.
  if (g == nullptr || g->answered || g->receiving) return UCS_OK;
  const std::string_view head_bytes(static_cast<const char*>(header), header_length);
  Result<PeerResponseHead> head = decode_peer_response_head(head_bytes);
  if (head.ok() && head->request_id != g->id) return UCS_OK;  // a late answer to an earlier get
  Status s = head.status();
  if (s.ok()) s = check_peer_response(*head, g->id, g->num_keys, length);
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (s.ok()) s = self->receive(*g, *head, data, length, rndv);
  if (!s.ok()) {
    g->status = Status(s.code(), "peer " + self->address_ + ": " + s.message());
    g->answered = true;
  }
  return g->receiving ? UCS_INPROGRESS : UCS_OK;
}

Status UcxPeerClient::receive(Get& g, const PeerResponseHead& head, void* data, size_t length,
                              bool rndv) {
  if (!rndv) {
    // Eager: the values are here, in UCX's buffer until the callback returns.
    STRATA_RETURN_IF_ERROR(split_peer_values(
        head, std::string_view(static_cast<const char*>(data), length), g.values));
    g.answered = true;
    return Status::Ok();
  }
  // Rendezvous: each value's string sized by the head, the values received straight into them.
  // A spare string of the same size (blocks are) is resized without touching its bytes.
  g.values.resize(head.num_keys);
  g.iov.clear();
  for (size_t i = 0; i < head.lengths.size(); ++i) {
    if (head.lengths[i] == 0) continue;
    g.values[i] = pool_.take();
    if (g.values[i].capacity() < head.lengths[i]) g.values[i].clear();  // nothing to copy over
    g.values[i].resize(head.lengths[i]);
    g.iov.push_back(ucp_dt_iov_t{g.values[i].data(), head.lengths[i]});
  }
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  p.cb.recv_am = &UcxPeerClient::on_received;
  p.user_data = &g;
  p.datatype = ucp_dt_make_iov();
  const ucs_status_ptr_t req =
      ucp_am_recv_data_nbx(worker_->get(), data, g.iov.data(), g.iov.size(), &p);
  if (UCS_PTR_IS_ERR(req)) return ucx_status(UCS_PTR_STATUS(req), "receiving values");
  if (req == nullptr) {
    g.answered = true;
  } else {
    g.receiving = true;
  }
  return Status::Ok();
}

void UcxPeerClient::on_sent(void* request, ucs_status_t status, void* user_data) {
  auto* g = static_cast<Get*>(user_data);
  ucp_request_free(request);
  g->sending = false;
  if (status != UCS_OK && !g->answered) {
    g->status = ucx_status(status, "sending the request");
    g->answered = true;
  }
}

void UcxPeerClient::on_received(void* request, ucs_status_t status, size_t /*length*/,
                                void* user_data) {
  auto* g = static_cast<Get*>(user_data);
  ucp_request_free(request);
  g->receiving = false;
  g->answered = true;
  if (status != UCS_OK) g->status = ucx_status(status, "receiving values");
}

}  // namespace

Result<std::unique_ptr<PeerClient>> connect_ucx_peer(const std::string& address,
                                                     milliseconds timeout) {
  std::string host;
  int port = 0;
  STRATA_RETURN_IF_ERROR(split_host_port(address, &host, &port));
  sockaddr_storage addr{};
  socklen_t len = 0;
  STRATA_RETURN_IF_ERROR(parse_socket_address(host, port, /*passive=*/false, &addr, &len));
  if (timeout.count() <= 0) return Status::InvalidArgument("a peer client needs a timeout");
  return UcxPeerClient::connect(addr, len, address, timeout);
}

}  // namespace strata::kv

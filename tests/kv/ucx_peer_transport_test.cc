// The UCX peer transport (kv/ucx_peer_transport.h) with a server and clients in one process over
// TCP loopback: values come back bit-identical, absent keys empty, in one round trip per get;
// clients on two threads at once all get the right answers; a server gone makes the next get
// Unavailable within the timeout; nothing listening is an error at connect, not a hang; frames a
// well-behaved client never sends (garbage, truncated, rendezvous) are refused or dropped while
// the server goes on serving others.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ucp/api/ucp.h>

#include "kv/peer_frames.h"
#include "kv/peer_transport.h"
#include "kv/tier_key.h"
#include "kv/ucx_peer_transport.h"
#include "kv/ucx_worker.h"

namespace strata::kv {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A get that should succeed is given kGenerous: ctest runs two tests at a time on a 2-core
// machine, beside ASan, and a 64 MiB get that takes 20 ms alone has taken over 5 s there. Tests
// of the timeout itself use kShort and bound the time a failing get took by kShort + kSlack.
constexpr std::chrono::milliseconds kGenerous = 30s;
constexpr std::chrono::milliseconds kShort = 2s;
constexpr std::chrono::milliseconds kSlack = 8s;

TierKey key(uint64_t i) {
  TierKey k;
  k.ns = 0x5eed;
  for (size_t b = 0; b < k.hash.bytes.size(); ++b) {
    k.hash.bytes[b] = static_cast<uint8_t>((i >> (8 * (b % 8))) + b);
  }
  return k;
}

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    for (size_t b = 0; b < 8; ++b) out[i + b] = static_cast<char>(v >> (8 * b));
  }
  for (size_t i = n - n % 8; i < n; ++i) out[i] = static_cast<char>(rng());
  return out;
}

// What the server holds: key i -> value, fixed before the server starts (the lookup reads it on
// the server's thread).
using Store = std::map<uint64_t, std::string>;

PeerBlockLookup lookup_in(const Store& store, std::atomic<int>* calls = nullptr) {
  return [&store, calls](std::span<const TierKey> keys, uint16_t /*flags*/,
                         std::vector<std::string>& values) {
    if (calls != nullptr) calls->fetch_add(1);
    for (size_t i = 0; i < keys.size(); ++i) {
      // The test's keys carry their index in the hash's first 8 bytes (minus the byte offsets).
      uint64_t id = 0;
      for (size_t b = 0; b < 8; ++b) id |= uint64_t(uint8_t(keys[i].hash.bytes[b] - b)) << (8 * b);
      const auto it = store.find(id);
      if (it != store.end() && keys[i] == key(id)) values[i] = it->second;
    }
  };
}

std::unique_ptr<PeerServer> start(const Store& store, std::atomic<int>* calls = nullptr) {
  Result<std::unique_ptr<PeerServer>> s =
      start_ucx_peer_server("127.0.0.1", 0, lookup_in(store, calls));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::unique_ptr<PeerClient> connect(const PeerServer& server, std::chrono::milliseconds timeout) {
  Result<std::unique_ptr<PeerClient>> c = connect_ucx_peer(server.address(), timeout);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(UcxPeerTransportTest, PresentAbsentAndMixedKeysComeBackBitIdentical) {
  Store store;
  for (uint64_t i = 0; i < 32; ++i) store[i] = random_bytes(2u << 20, i);  // the 8B model's blocks
  store[100] = "small";
  store[101] = random_bytes(3000, 101);
  std::atomic<int> calls = 0;
  const std::unique_ptr<PeerServer> server = start(store, &calls);
  ASSERT_NE(server, nullptr);
  EXPECT_NE(server->address().find("127.0.0.1:"), std::string::npos) << server->address();
  const std::unique_ptr<PeerClient> client = connect(*server, kGenerous);
  ASSERT_NE(client, nullptr);

  std::vector<TierKey> all;
  for (uint64_t i = 0; i < 32; ++i) all.push_back(key(i));
  std::vector<std::string> values = {"stale"};
  const int calls_before = calls.load();
  ASSERT_TRUE(client->get(all, values).ok());
  EXPECT_EQ(calls.load(), calls_before + 1);  // one request for the whole list
  ASSERT_EQ(values.size(), 32u);
  for (uint64_t i = 0; i < 32; ++i) EXPECT_TRUE(values[i] == store.at(i)) << "value " << i;

  // Absent keys only: all empty. A key of another namespace is absent too.
  TierKey other = key(3);
  other.ns ^= 1;
  ASSERT_TRUE(client->get(std::vector<TierKey>{key(7000), other, key(7001)}, values).ok());
  EXPECT_EQ(values, std::vector<std::string>(3));

  // Mixed, small and large, in the order asked.
  const std::vector<TierKey> mixed = {key(100), key(5000), key(31), key(101), key(5001), key(0)};
  ASSERT_TRUE(client->get(mixed, values).ok());
  ASSERT_EQ(values.size(), mixed.size());
  EXPECT_EQ(values[0], "small");
  EXPECT_TRUE(values[1].empty());
  EXPECT_TRUE(values[2] == store.at(31));
  EXPECT_TRUE(values[3] == store.at(101));
  EXPECT_TRUE(values[4].empty());
  EXPECT_TRUE(values[5] == store.at(0));

  // Small values only (UCX sends them eagerly rather than by rendezvous).
  ASSERT_TRUE(client->get(std::vector<TierKey>{key(101), key(100)}, values).ok());
  EXPECT_TRUE(values[0] == store.at(101));
  EXPECT_EQ(values[1], "small");

  // A rough rate for 32 x 2 MiB over loopback, for the report (not a benchmark).
  constexpr int kRounds = 10;
  const Clock::time_point t0 = Clock::now();
  for (int r = 0; r < kRounds; ++r) ASSERT_TRUE(client->get(all, values).ok());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ timing   ] 32 x 2 MiB get: %.2f ms each, %.2f GB/s\n", s / kRounds * 1e3,
              kRounds * 32.0 * (2u << 20) / s / 1e9);
  EXPECT_TRUE(values[17] == store.at(17));
}

TEST(UcxPeerTransportTest, AnEmptyKeyListIsOneEmptyAnswer) {
  const Store store = {{1, "x"}};
  const std::unique_ptr<PeerServer> server = start(store);
  ASSERT_NE(server, nullptr);
  const std::unique_ptr<PeerClient> client = connect(*server, kGenerous);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> values = {"stale"};
  ASSERT_TRUE(client->get({}, values).ok());
  EXPECT_TRUE(values.empty());
}

TEST(UcxPeerTransportTest, MoreKeysThanARequestCarriesIsRefusedLocally) {
  const Store store;
  const std::unique_ptr<PeerServer> server = start(store);
  ASSERT_NE(server, nullptr);
  const std::unique_ptr<PeerClient> client = connect(*server, kGenerous);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> values;
  const std::vector<TierKey> many(kMaxPeerKeys + 1, key(1));
  EXPECT_EQ(client->get(many, values).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(values.size(), many.size());
  // The most a request carries goes through, and the client still works.
  const std::vector<TierKey> most(kMaxPeerKeys, key(1));
  EXPECT_TRUE(client->get(most, values).ok());
  EXPECT_EQ(values.size(), most.size());
}

TEST(UcxPeerTransportTest, TwoClientsOnTwoThreadsGetTheirAnswers) {
  Store store;
  for (uint64_t i = 0; i < 64; ++i) store[i] = random_bytes(1 + (i * 7919) % (256 << 10), i);
  const std::unique_ptr<PeerServer> server = start(store);
  ASSERT_NE(server, nullptr);
  std::atomic<int> wrong = 0, failed = 0;
  auto run = [&](uint64_t seed) {
    const std::unique_ptr<PeerClient> client = connect(*server, kGenerous);
    if (client == nullptr) {
      failed.fetch_add(1);
      return;
    }
    std::mt19937_64 rng(seed);
    std::vector<std::string> values;
    for (int round = 0; round < 200; ++round) {
      std::vector<TierKey> keys(rng() % 40);
      std::vector<uint64_t> ids;
      for (TierKey& k : keys) {
        ids.push_back(rng() % 80);  // a fifth absent
        k = key(ids.back());
      }
      if (!client->get(keys, values).ok() || values.size() != keys.size()) {
        failed.fetch_add(1);
        continue;
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto it = store.find(ids[i]);
        if (values[i] != (it == store.end() ? std::string() : it->second)) wrong.fetch_add(1);
      }
    }
  };
  std::thread a(run, 1), b(run, 2);
  a.join();
  b.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

TEST(UcxPeerTransportTest, AServerGoneIsUnavailableWithinTheTimeout) {
  Store store = {{1, random_bytes(1 << 20, 1)}};
  std::unique_ptr<PeerServer> server = start(store);
  ASSERT_NE(server, nullptr);
  const std::unique_ptr<PeerClient> client = connect(*server, kShort);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> values;
  ASSERT_TRUE(client->get(std::vector<TierKey>{key(1)}, values).ok());
  server.reset();
  for (int i = 0; i < 2; ++i) {
    const Clock::time_point t0 = Clock::now();
    const Status s = client->get(std::vector<TierKey>{key(1)}, values);
    const auto took = Clock::now() - t0;
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_LT(took, kShort + kSlack) << std::chrono::duration<double>(took).count() << " s";
    EXPECT_EQ(values, std::vector<std::string>(1));
  }
  // The client is destroyed cleanly with its connection gone.
}

// A peer that does not answer in time: Unavailable after the timeout. Its answer, when it comes
// (2 MiB: by rendezvous), is dropped, and the next get gets its own.
// A forked child, killed and reaped when this goes out of scope, and killed by the kernel if the
// test process dies first: a child left behind would hold the test's output pipe open, and
// ctest waits for that pipe to close.
class ChildProcess {
 public:
  // Forks; in the child, runs body and exits.
  template <typename Body>
  explicit ChildProcess(Body body) : pid_(fork()) {
    if (pid_ != 0) return;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    body();
    _exit(0);
  }
  ~ChildProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// The serving process is killed while the client reads from it, as a prefill instance dying
// mid-transfer: the get in flight, or the next, fails (Unavailable, within the timeout) rather
// than hanging or crashing the client, and every get that succeeded was whole. Two processes on
// one host: the values travel over shared memory.
TEST(UcxPeerTransportTest, AServerProcessKilledMidTransferFailsTheGet) {
  constexpr size_t kValueBytes = size_t{1} << 20;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const ChildProcess server_process([&fds] {
    close(fds[0]);
    const std::string value(kValueBytes, 'v');
    auto server = start_ucx_peer_server("127.0.0.1", 0,
                                        [&value](std::span<const TierKey> keys, uint16_t /*flags*/,
                                                 std::vector<std::string>& values) {
                                          for (size_t i = 0; i < keys.size(); ++i)
                                            values[i].assign(value);
                                        });
    if (!server.ok()) _exit(1);
    const std::string address = (*server)->address();
    if (write(fds[1], address.data(), address.size()) < 0) _exit(1);
    close(fds[1]);
    for (;;) pause();
  });
  ASSERT_GE(server_process.pid(), 0);
  close(fds[1]);
  char buf[128] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  ASSERT_GT(n, 0) << "the serving process did not start";
  auto client = connect_ucx_peer(std::string(buf, static_cast<size_t>(n)), kShort);
  ASSERT_TRUE(client.ok()) << client.status().message();
  std::vector<TierKey> keys(32);
  std::vector<std::string> values;
  ASSERT_TRUE((*client)->get(keys, values).ok());
  // Joined on every way out of the test, an assertion's early return included.
  std::jthread killer([pid = server_process.pid()] {
    std::this_thread::sleep_for(5ms);
    kill(pid, SIGKILL);
  });
  Status s;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    const auto start = std::chrono::steady_clock::now();
    s = (*client)->get(keys, values);
    EXPECT_LT(std::chrono::steady_clock::now() - start, kShort + kSlack)
        << "a get outlived its timeout";
    if (!s.ok()) break;
    for (const std::string& v : values) ASSERT_EQ(v, std::string(kValueBytes, 'v'));
  }
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.message();
}

TEST(UcxPeerTransportTest, ALateAnswerIsDroppedAndTheNextGetGetsItsOwn) {
  const Store store = {{1, random_bytes(2u << 20, 1)}, {2, "two"}};
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;
  const PeerBlockLookup inner = lookup_in(store);
  Result<std::unique_ptr<PeerServer>> server = start_ucx_peer_server(
      "127.0.0.1", 0,
      [&](std::span<const TierKey> keys, uint16_t /*flags*/, std::vector<std::string>& values) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !hold; });
        inner(keys, 0, values);
      });
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::unique_ptr<PeerClient> client = connect(**server, kShort);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> values;
  {
    const std::lock_guard lock(mu);
    hold = true;
  }
  const Clock::time_point t0 = Clock::now();
  const Status s = client->get(std::vector<TierKey>{key(1)}, values);
  const auto took = Clock::now() - t0;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  EXPECT_GE(took, kShort - 10ms);
  EXPECT_LT(took, kShort + kSlack);
  EXPECT_EQ(values, std::vector<std::string>(1));
  {
    const std::lock_guard lock(mu);
    hold = false;
  }
  cv.notify_all();
  ASSERT_TRUE(client->get(std::vector<TierKey>{key(2)}, values).ok());
  EXPECT_EQ(values, std::vector<std::string>{"two"});
  ASSERT_TRUE(client->get(std::vector<TierKey>{key(1)}, values).ok());
  ASSERT_EQ(values.size(), 1u);
  EXPECT_TRUE(values[0] == store.at(1));
}

TEST(UcxPeerTransportTest, LookupFailuresComeBackAsErrors) {
  // A lookup that breaks its contract (resizes values) or throws fails that request only.
  std::atomic<int> n = 0;
  Result<std::unique_ptr<PeerServer>> server = start_ucx_peer_server(
      "127.0.0.1", 0,
      [&n](std::span<const TierKey> keys, uint16_t /*flags*/, std::vector<std::string>& values) {
        const int call = n.fetch_add(1);
        if (keys.size() == 1 && call % 2 == 1) values.emplace_back("extra");
        if (keys.size() == 1 && call % 2 == 0 && call > 0) throw std::runtime_error("lookup");
        if (keys.size() == 2) values[0] = "ok";
      });
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::unique_ptr<PeerClient> client = connect(**server, kGenerous);  // call 0
  ASSERT_NE(client, nullptr);
  std::vector<std::string> values;
  EXPECT_EQ(client->get(std::vector<TierKey>{key(1)}, values).code(), StatusCode::kInternal);
  EXPECT_EQ(client->get(std::vector<TierKey>{key(1)}, values).code(), StatusCode::kInternal);
  ASSERT_TRUE(client->get(std::vector<TierKey>{key(1), key(2)}, values).ok());
  EXPECT_EQ(values, (std::vector<std::string>{"ok", ""}));
}

// A free loopback port: bound, then released.
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(UcxPeerTransportTest, NothingListeningIsAnErrorAtConnect) {
  const std::string address = "127.0.0.1:" + std::to_string(unused_port());
  const Clock::time_point t0 = Clock::now();
  const Result<std::unique_ptr<PeerClient>> c = connect_ucx_peer(address, 200ms);
  EXPECT_LT(Clock::now() - t0, 200ms + kSlack);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().to_string();

  for (const char* bad :
       {"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1:12x", ":1234"}) {
    EXPECT_EQ(connect_ucx_peer(bad, 200ms).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(start_ucx_peer_server("127.0.0.1", 70000, lookup_in(Store{})).status().code(),
            StatusCode::kInvalidArgument);
}

// A client speaking raw frames over UCX, for what UcxPeerClient never sends.
class RawPeer {
 public:
  explicit RawPeer(const std::string& address) {
    Result<std::unique_ptr<UcxWorker>> w = UcxWorker::create(UcxTransports::kDefault);
    if (!w.ok()) w = UcxWorker::create(UcxTransports::kTcp);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    worker_ = std::move(w).value();
    EXPECT_TRUE(worker_->set_am_handler(kPeerResponseAmId, &RawPeer::on_response, this).ok());
    std::string host;
    int port = 0;
    EXPECT_TRUE(split_host_port(address, &host, &port).ok());
    sockaddr_storage addr{};
    socklen_t len = 0;
    EXPECT_TRUE(parse_socket_address(host, port, false, &addr, &len).ok());
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    p.sockaddr.addrlen = len;
    p.err_mode = kPeerErrorMode;
    EXPECT_EQ(ucp_ep_create(worker_->get(), &p, &ep_), UCS_OK);
  }
  ~RawPeer() {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    const ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
    if (UCS_PTR_IS_PTR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) worker_->progress_or_sleep(1ms);
      ucp_request_free(r);
    }
  }
  // Sends frame with the given flags and waits for it to go: its send status.
  ucs_status_t send(const std::string& frame, uint32_t flags) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY | flags;
    const ucs_status_ptr_t r =
        ucp_am_send_nbx(ep_, kPeerRequestAmId, nullptr, 0, frame.data(), frame.size(), &p);
    if (!UCS_PTR_IS_PTR(r)) return UCS_PTR_STATUS(r);
    const Clock::time_point deadline = Clock::now() + 5s;
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) {
      worker_->progress_or_sleep(10ms);
    }
    const ucs_status_t s = ucp_request_check_status(r);
    ucp_request_free(r);
    return s;
  }
  // The head of the next answer, or nullopt when none came within 5 s.
  std::optional<PeerResponseHead> next_answer() {
    const Clock::time_point deadline = Clock::now() + 5s;
    while (answers_.empty() && Clock::now() < deadline) worker_->progress_or_sleep(10ms);
    if (answers_.empty()) return std::nullopt;
    PeerResponseHead h = answers_.front();
    answers_.erase(answers_.begin());
    return h;
  }

 private:
  static ucs_status_t on_response(void* arg, const void* header, size_t header_length,
                                  void* /*data*/, size_t /*length*/,
                                  const ucp_am_recv_param_t* /*param*/) {
    Result<PeerResponseHead> h =
        decode_peer_response_head({static_cast<const char*>(header), header_length});
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (h.ok()) static_cast<RawPeer*>(arg)->answers_.push_back(std::move(h).value());
    return UCS_OK;  // values, if any, dropped
  }
  std::unique_ptr<UcxWorker> worker_;
  ucp_ep_h ep_ = nullptr;
  std::vector<PeerResponseHead> answers_;
};

TEST(UcxPeerTransportTest, MalformedRequestsAreRefusedOrDroppedAndServingGoesOn) {
  const Store store = {{1, "one"}};
  std::atomic<int> calls = 0;
  const std::unique_ptr<PeerServer> server = start(store, &calls);
  ASSERT_NE(server, nullptr);
  RawPeer raw(server->address());
  std::string good;
  encode_peer_request(7, std::vector<TierKey>{key(1)}, good);

  // Garbage (no magic, nothing to answer) and an empty frame are dropped: the first answer is the
  // good request's, sent after them on the same connection.
  EXPECT_EQ(raw.send(std::string(100, 'z'), 0), UCS_OK);
  EXPECT_EQ(raw.send(std::string(), 0), UCS_OK);
  EXPECT_EQ(raw.send(good, 0), UCS_OK);
  std::optional<PeerResponseHead> a = raw.next_answer();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->request_id, 7u);
  EXPECT_EQ(a->status, PeerFrameStatus::kOk);
  EXPECT_EQ(a->lengths, std::vector<uint32_t>{3});

  // A truncated request whose header reads is refused with its id; the lookup never sees it.
  const int before = calls.load();
  std::string truncated;
  encode_peer_request(8, std::vector<TierKey>{key(1), key(2)}, truncated);
  truncated.resize(truncated.size() - 1);
  EXPECT_EQ(raw.send(truncated, 0), UCS_OK);
  a = raw.next_answer();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->request_id, 8u);
  EXPECT_EQ(a->status, PeerFrameStatus::kBadRequest);
  EXPECT_EQ(calls.load(), before);

  // A request sent by rendezvous is refused without the server receiving it: the send fails.
  std::string big;
  encode_peer_request(9, std::vector<TierKey>(kMaxPeerKeys, key(1)), big);
  EXPECT_NE(raw.send(big, UCP_AM_SEND_FLAG_RNDV), UCS_OK);

  // The server still answers this connection and new ones.
  encode_peer_request(10, std::vector<TierKey>{key(1)}, good);
  EXPECT_EQ(raw.send(good, 0), UCS_OK);
  a = raw.next_answer();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->request_id, 10u);
  const std::unique_ptr<PeerClient> client = connect(*server, kGenerous);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> values;
  ASSERT_TRUE(client->get(std::vector<TierKey>{key(1)}, values).ok());
  EXPECT_EQ(values, std::vector<std::string>{"one"});
}

}  // namespace
}  // namespace strata::kv

#include "kv/kv_event_publisher.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <array>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "core/check.h"

namespace strata::kv {

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
};

namespace {

// How often the publisher thread looks at the replay socket when no batch wakes it.
constexpr std::chrono::milliseconds kReplayPoll{5};

std::array<char, 8> seq_bytes(int64_t seq) {
  std::array<char, 8> b{};
  const auto u = static_cast<uint64_t>(seq);
  for (size_t i = 0; i < 8; ++i) b[i] = static_cast<char>(u >> (56 - 8 * i));
  return b;
}

int64_t seq_from_bytes(const zmq::message_t& m) {
  uint64_t u = 0;
  const auto* p = static_cast<const unsigned char*>(m.data());
  for (size_t i = 0; i < 8; ++i) u = (u << 8) | p[i];
  return static_cast<int64_t>(u);
}

bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

// A frame that is not the last of its message; every send is non-blocking (a PUB or ROUTER at
// its high-water mark drops instead).
constexpr auto kMore = zmq::send_flags::sndmore | zmq::send_flags::dontwait;

}  // namespace

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::create(KvEventPublisherConfig config) {
  if (config.endpoint.empty()) return Status::InvalidArgument("the KV events endpoint is empty");
  if (config.buffer_steps < 1 || config.hwm < 0 || config.max_queue_batches < 1 ||
      config.block_size < 1) {
    return Status::InvalidArgument(
        "KV events: buffer_steps, max_queue_batches and block_size must be >= 1, hwm >= 0");
  }
  auto sockets = std::make_unique<Sockets>();
  const std::string* at = &config.endpoint;
  try {
    sockets->pub.set(zmq::sockopt::sndhwm, config.hwm);
    sockets->pub.set(zmq::sockopt::linger, 0);
    if (binds(config.endpoint)) {
      sockets->pub.bind(config.endpoint);
    } else {
      sockets->pub.connect(config.endpoint);
    }
    if (!config.replay_endpoint.empty()) {
      at = &config.replay_endpoint;
      sockets->replay.emplace(sockets->context, zmq::socket_type::router);
      sockets->replay->set(zmq::sockopt::linger, 0);
      sockets->replay->bind(config.replay_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("KV events endpoint " + *at + ": " + e.what());
  }
  std::string endpoint = sockets->pub.get(zmq::sockopt::last_endpoint);
  std::string replay_endpoint =
      sockets->replay ? sockets->replay->get(zmq::sockopt::last_endpoint) : std::string();
  auto publisher = std::unique_ptr<KvEventPublisher>(
      new KvEventPublisher(std::move(config), std::move(sockets)));
  publisher->endpoint_ = std::move(endpoint);
  publisher->replay_endpoint_ = std::move(replay_endpoint);
  return publisher;
}

KvEventPublisher::KvEventPublisher(KvEventPublisherConfig config, std::unique_ptr<Sockets> sockets)
    : config_(std::move(config)), sockets_(std::move(sockets)), thread_([this] { run(); }) {}

KvEventPublisher::~KvEventPublisher() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void KvEventPublisher::on_block_stored(const BlockStoredEvent& event) {
  STRATA_CHECK(static_cast<int32_t>(event.token_ids.size()) == config_.block_size,
               "KV events: a stored block's tokens are not block_size");
  const std::optional<uint64_t> parent =
      event.parent_hash ? std::optional<uint64_t>(wire_block_hash(*event.parent_hash))
                        : std::nullopt;
  step_.add_stored(wire_block_hash(event.hash), parent, event.token_ids.data(), config_.block_size);
}

void KvEventPublisher::on_block_removed(const BlockRemovedEvent& event) {
  step_.add_removed(wire_block_hash(event.hash));
}

void KvEventPublisher::on_all_blocks_cleared() { step_.add_all_cleared(); }

void KvEventPublisher::on_tier_block_stored(KvMedium medium, const BlockHash& hash) {
  step_.add_tier_stored(medium, wire_block_hash(hash), config_.block_size);
}

void KvEventPublisher::on_tier_block_removed(KvMedium medium, const BlockHash& hash) {
  step_.add_removed(wire_block_hash(hash), medium);
}

void KvEventPublisher::end_step() {
  if (step_.events.empty()) return;
  step_.ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t blocks = step_.num_blocks();
  bool taken = false;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int32_t>(queue_.size()) < config_.max_queue_batches) {
      queue_.push_back(std::move(step_));
      taken = true;
    }
  }
  step_ = WireKvEventBatch{};
  if (taken) {
    queued_blocks_ += blocks;
    wake_.notify_one();
  } else {
    dropped_blocks_ += blocks;
    ++dropped_batches_;
  }
}

void KvEventPublisher::pause() {
  const std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void KvEventPublisher::resume() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  wake_.notify_one();
}

KvEventPublisherStats KvEventPublisher::stats() const {
  return KvEventPublisherStats{.queued_blocks = queued_blocks_.load(),
                               .dropped_blocks = dropped_blocks_.load(),
                               .dropped_batches = dropped_batches_.load(),
                               .sent_batches = sent_batches_.load()};
}

void KvEventPublisher::run() {
  std::deque<WireKvEventBatch> work;
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto ready = [this] { return stop_ || (!paused_ && !queue_.empty()); };
      if (sockets_->replay) {
        wake_.wait_for(lock, kReplayPoll, ready);
      } else {
        wake_.wait(lock, ready);
      }
      stopping = stop_;
      if (!paused_ || stopping) work.swap(queue_);
    }
    for (WireKvEventBatch& batch : work) send(batch);
    work.clear();
    if (!sockets_->replay) {
      if (stopping) return;
      continue;
    }
    // Replay requests, answered from the buffer: [id, "", start_seq] -> the kept batches from
    // start_seq on, then the end marker. A malformed request is ignored, as vLLM does.
    zmq::socket_t& router = *sockets_->replay;
    std::vector<zmq::message_t> request;
    while (zmq::recv_multipart(router, std::back_inserter(request), zmq::recv_flags::dontwait)) {
      if (request.size() == 3 && request[1].size() == 0 && request[2].size() == 8) {
        const int64_t start = seq_from_bytes(request[2]);
        for (const auto& [seq, payload] : replay_buffer_) {
          if (seq < start) continue;
          const std::array<char, 8> s = seq_bytes(seq);
          (void)router.send(zmq::buffer(request[0].data(), request[0].size()), kMore);
          (void)router.send(zmq::message_t(), kMore);
          (void)router.send(zmq::buffer(s), kMore);
          (void)router.send(zmq::buffer(payload), zmq::send_flags::dontwait);
        }
        const std::array<char, 8> end = seq_bytes(-1);
        (void)router.send(zmq::buffer(request[0].data(), request[0].size()), kMore);
        (void)router.send(zmq::message_t(), kMore);
        (void)router.send(zmq::buffer(end), kMore);
        (void)router.send(zmq::message_t(), zmq::send_flags::dontwait);
      }
      request.clear();
    }
    if (stopping) return;
  }
}

void KvEventPublisher::send(WireKvEventBatch& batch) {
  const int64_t seq = sent_batches_.load();
  std::string payload = encode_kv_event_batch(batch);
  const std::array<char, 8> s = seq_bytes(seq);
  zmq::socket_t& pub = sockets_->pub;
  (void)pub.send(zmq::buffer(config_.topic), kMore);
  (void)pub.send(zmq::buffer(s), kMore);
  (void)pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  replay_buffer_.emplace_back(seq, std::move(payload));
  if (static_cast<int32_t>(replay_buffer_.size()) > config_.buffer_steps) {
    replay_buffer_.pop_front();
  }
  sent_batches_.store(seq + 1);
}

}  // namespace strata::kv

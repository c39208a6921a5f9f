#include "router/kv_event_subscriber.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <cstdio>
#include <deque>
#include <iterator>
#include <optional>
#include <utility>

#include "router/kv_event_decode.h"

namespace strata::router {
namespace {

using Clock = std::chrono::steady_clock;

// Batches held while a replay runs, at most (the oldest go first; the index is approximate).
constexpr size_t kMaxHeld = 100000;

int64_t read_seq(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* p = static_cast<const uint8_t*>(m.data());
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

// One instance's sockets and where its stream stands; lives on the subscriber's thread.
struct Stream {
  Stream(zmq::context_t& ctx, const KvEventSubscriber::Source& s, KvEventSubscriber::Counters& c)
      : index(s.index), counters(c), sub(ctx, zmq::socket_type::sub) {
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(s.events);
    if (!s.replay.empty()) {
      replay.emplace(ctx, zmq::socket_type::dealer);
      replay->set(zmq::sockopt::linger, 0);
      replay->connect(s.replay);
    }
  }

  void ask_replay(int64_t start, Clock::duration timeout) {
    uint8_t be[8];
    for (int i = 0; i < 8; ++i)
      be[i] = static_cast<uint8_t>(static_cast<uint64_t>(start) >> (56 - 8 * i));
    replay->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    replay->send(zmq::buffer(be, 8), zmq::send_flags::dontwait);
    replaying = true;
    deadline = Clock::now() + timeout;
  }

  void apply(int64_t seq, const zmq::message_t& payload) {
    const Result<kv::WireKvEventBatch> b = decode_kv_event_batch(payload.to_string_view());
    if (!b.ok()) {
      ++counters.num_bad;
      return;
    }
    index->apply(b.value());
    last = seq;
    ++counters.num_batches;
  }

  void end_replay() {
    replaying = false;
    std::deque<std::pair<int64_t, zmq::message_t>> held_now;
    held_now.swap(held);
    for (auto& [seq, payload] : held_now) {
      if (seq > last) apply(seq, payload);
    }
  }

  void on_live(Clock::duration timeout) {
    std::vector<zmq::message_t> m;
    if (!zmq::recv_multipart(sub, std::back_inserter(m), zmq::recv_flags::dontwait)) return;
    if (m.size() != 3 || m[1].size() != 8) {
      ++counters.num_bad;
      return;
    }
    const int64_t seq = read_seq(m[1]);
    if (replaying) {
      if (held.size() == kMaxHeld) held.pop_front();
      held.emplace_back(seq, std::move(m[2]));
      return;
    }
    if (last >= 0 && seq <= last) {  // the instance restarted
      index->clear();
      last = -1;
    }
    const int64_t want = last + 1;
    if (seq > want) {
      ++counters.num_gaps;
      if (replay) {
        held.emplace_back(seq, std::move(m[2]));
        ask_replay(want, timeout);
        return;
      }
    }
    apply(seq, m[2]);
  }

  void on_replay() {
    std::vector<zmq::message_t> m;
    if (!zmq::recv_multipart(*replay, std::back_inserter(m), zmq::recv_flags::dontwait)) return;
    if (m.size() != 3 || m[1].size() != 8) {
      ++counters.num_bad;
      return;
    }
    if (!replaying) return;  // an answer to a request given up
    const int64_t seq = read_seq(m[1]);
    if (seq == -1) {
      end_replay();
      return;
    }
    if (seq > last) {
      apply(seq, m[2]);
      ++counters.num_replayed;
    }
  }

  PrefixIndex* index;
  KvEventSubscriber::Counters& counters;
  zmq::socket_t sub;
  std::optional<zmq::socket_t> replay;
  int64_t last = -1;  // the last sequence number applied
  bool replaying = false;
  Clock::time_point deadline;
  std::deque<std::pair<int64_t, zmq::message_t>> held;
};

}  // namespace

KvEventSubscriber::KvEventSubscriber(std::vector<Source> sources,
                                     std::chrono::milliseconds replay_timeout)
    : sources_(std::move(sources)), replay_timeout_(replay_timeout) {
  for (size_t i = 0; i < sources_.size(); ++i) counters_.push_back(std::make_unique<Counters>());
  thread_ = std::thread([this] { run(); });
}

KvEventSubscriber::~KvEventSubscriber() {
  stop_ = true;
  thread_.join();
}

void KvEventSubscriber::run() {
  try {
    zmq::context_t ctx(1);
    std::vector<std::unique_ptr<Stream>> streams;
    for (size_t i = 0; i < sources_.size(); ++i) {
      streams.push_back(std::make_unique<Stream>(ctx, sources_[i], *counters_[i]));
      if (streams.back()->replay) streams.back()->ask_replay(0, replay_timeout_);
    }
    std::vector<zmq::pollitem_t> items;
    for (const auto& s : streams) {
      items.push_back({s->sub.handle(), 0, ZMQ_POLLIN, 0});
      if (s->replay) items.push_back({s->replay->handle(), 0, ZMQ_POLLIN, 0});
    }
    while (!stop_) {
      zmq::poll(items, std::chrono::milliseconds(100));
      size_t k = 0;
      for (const auto& s : streams) {
        if ((items[k++].revents & ZMQ_POLLIN) != 0) s->on_live(replay_timeout_);
        if (s->replay) {
          if ((items[k++].revents & ZMQ_POLLIN) != 0) s->on_replay();
          if (s->replaying && Clock::now() > s->deadline) s->end_replay();
        }
      }
    }
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "strata: route: KV events stopped: %s\n", e.what());
  }
}

}  // namespace strata::router

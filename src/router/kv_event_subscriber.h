#pragma once
// KvEventSubscriber: feeds each instance's PrefixIndex from its KV events (docs/kv-events.md).
//
// One thread owns a ZeroMQ context and, per instance, a SUB socket connected to its events
// endpoint and, when given, a DEALER connected to its replay endpoint. The router catches up
// through the replay endpoint when it connects (from sequence 0) and when it sees a gap in the
// sequence numbers (from the first one missing); batches published meanwhile wait and follow
// the replayed ones. A sequence number at or below the last one applied means the instance
// restarted (its numbers start again at 0, its cache empty): its index is cleared. A replay that
// does not end within replay_timeout is given up (the batches that waited are applied). Without
// a replay endpoint a gap is only counted.
//
// Thread-safe: the counters are atomics; the destructor stops and joins the thread (within one
// 100 ms poll).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "router/prefix_index.h"

namespace strata::router {

class KvEventSubscriber {
 public:
  struct Source {
    std::string events;  // the SUB's endpoint
    std::string replay;  // the DEALER's; "" = none
    PrefixIndex* index;  // borrowed: outlives the subscriber
  };
  struct Counters {
    std::atomic<int64_t> num_batches{0};   // applied (live or replayed)
    std::atomic<int64_t> num_replayed{0};  // of which came through the replay endpoint
    std::atomic<int64_t> num_gaps{0};      // sequence gaps seen
    std::atomic<int64_t> num_bad{0};       // messages that did not decode
  };

  KvEventSubscriber(std::vector<Source> sources, std::chrono::milliseconds replay_timeout);
  ~KvEventSubscriber();
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  const Counters& counters(size_t source_idx) const { return *counters_[source_idx]; }

 private:
  void run();

  std::vector<Source> sources_;
  std::chrono::milliseconds replay_timeout_;
  std::vector<std::unique_ptr<Counters>> counters_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata::router

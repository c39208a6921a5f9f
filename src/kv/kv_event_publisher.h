#pragma once
// KvEventPublisher: the block pool's KV events, and its tiers', to routers over ZeroMQ, in vLLM's
// wire format (kv_event_wire.h; docs/kv-events.md).
//
//   scheduler thread                          publisher thread (owns every ZeroMQ socket)
//   on_block_stored / _removed / _cleared,
//   on_tier_block_stored / _removed
//     -> this step's WireKvEventBatch
//   end_step(): stamp, push  ---- queue ---->  encode (msgpack), seq = 0, 1, 2, ...
//     (full: drop, count)     (max_queue_       PUB:    [topic, seq (int64 BE), payload]
//                              batches)         keep the last buffer_steps (seq, payload)
//                                               ROUTER: [id, "", start_seq] ->
//                                                 [id, "", seq, payload] per kept seq >= start,
//                                                 then [id, "", -1, ""]
//
// Owns the ZeroMQ context and sockets, the queue, the replay buffer and the thread. The engine
// never waits on a subscriber: the queue is bounded (a full queue drops the step's batch and
// counts its blocks), PUB drops what a slow subscriber's high-water mark cannot take, and every
// send is non-blocking. Sequence numbers count the batches sent, so a dropped batch leaves no gap.
//
// Thread-safety: the KvEventSink calls, end_step, pause and resume come from one thread (the
// scheduler's); stats() from any. Cost per step: one copy of each stored block's token ids on
// the scheduler thread; encoding and sending on the publisher thread. The destructor sends what
// is queued (no wait for subscribers: linger 0) and joins the thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kv/kv_event_wire.h"
#include "kv/kv_events.h"
#include "strata/status.h"

namespace strata::kv {

struct KvEventPublisherConfig {
  // PUB: bound when it has a wildcard ('*', '::') or is ipc:// or inproc://, else connected to
  // (vLLM's rule). tcp://*:5557 is vLLM's default.
  std::string endpoint = "tcp://*:5557";
  std::string replay_endpoint;         // ROUTER, bound; empty = no replay
  std::string topic;                   // the first frame of every message
  int32_t buffer_steps = 10000;        // batches kept for replay
  int32_t hwm = 100000;                // PUB's send high-water mark (messages)
  int32_t max_queue_batches = 100000;  // batches waiting for the publisher thread
  int32_t block_size = 16;
};

struct KvEventPublisherStats {
  int64_t queued_blocks = 0;   // blocks in batches the queue took (all of them are sent)
  int64_t dropped_blocks = 0;  // blocks in batches dropped because the queue was full
  int64_t dropped_batches = 0;
  int64_t sent_batches = 0;  // = the next sequence number
};

class KvEventPublisher final : public KvEventSink {
 public:
  // Opens the sockets (an endpoint ZeroMQ refuses, or one already bound, is an error naming it)
  // and starts the publisher thread.
  static Result<std::unique_ptr<KvEventPublisher>> create(KvEventPublisherConfig config);
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void on_block_stored(const BlockStoredEvent& event) override;
  void on_block_removed(const BlockRemovedEvent& event) override;
  void on_all_blocks_cleared() override;
  void on_tier_block_stored(KvMedium medium, const BlockHash& hash) override;
  void on_tier_block_removed(KvMedium medium, const BlockHash& hash) override;

  // The events since the last call, if any, become one batch stamped with the wall clock and go
  // to the publisher thread; a full queue drops it (counted). Never blocks on the thread.
  void end_step();

  // The publisher thread takes no batch while paused (tests fill the queue with it).
  void pause();
  void resume();

  KvEventPublisherStats stats() const;
  // The addresses the sockets have (a wildcard port resolved: tcp://127.0.0.1:41234); the
  // replay one empty without replay.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

 private:
  struct Sockets;  // the ZeroMQ context and sockets: zmq.hpp stays in the .cc
  KvEventPublisher(KvEventPublisherConfig config, std::unique_ptr<Sockets> sockets);
  void run();
  void send(WireKvEventBatch& batch);

  const KvEventPublisherConfig config_;
  std::unique_ptr<Sockets> sockets_;  // used by the publisher thread only, once it runs
  std::string endpoint_;
  std::string replay_endpoint_;
  WireKvEventBatch step_;                                      // the scheduler thread's
  std::deque<std::pair<int64_t, std::string>> replay_buffer_;  // publisher thread's: (seq, payload)

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<WireKvEventBatch> queue_;  // guarded by mu_
  bool paused_ = false;                 // guarded by mu_
  bool stop_ = false;                   // guarded by mu_

  std::atomic<int64_t> queued_blocks_{0};
  std::atomic<int64_t> dropped_blocks_{0};
  std::atomic<int64_t> dropped_batches_{0};
  std::atomic<int64_t> sent_batches_{0};
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace strata::kv

#pragma once
// AsyncEngine: the Engine on a thread of its own, for the server's handler threads. Engine is
// single-threaded; this class is the one place where other threads meet it. Handlers submit a
// request and get a RequestStream that the engine thread fills step by step; cancel() (a client
// that went away) reaches the engine before its next step.
//
// The engine thread loops: take queued submissions and cancellations, then run one step if any
// request is unfinished and hand each output to its stream; it sleeps when there is nothing to
// do. Owns the Engine and the thread; RequestStreams are shared with the handlers.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/status.h"
#include "strata/engine.h"

namespace strata::server {

// One request's outputs, in order, as the engine thread produces them.
class RequestStream {
 public:
  // Waits up to timeout for outputs and moves them into out. Returns false once the request's
  // last output (finished) has been taken, by this call or an earlier one.
  bool next(std::vector<RequestOutput>& out, std::chrono::milliseconds timeout);
  RequestId id() const { return id_; }

 private:
  friend class AsyncEngine;
  void push(RequestOutput output);

  RequestId id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> pending_;
  bool finished_ = false;
};

// Engine state the metrics and health endpoints read, refreshed after every step.
struct EngineSnapshot {
  EngineStepStats last_step;
  EngineTotals totals;
  int64_t num_unfinished = 0;
  int32_t max_num_running = 0;  // the most sequences running after any step since start
  std::vector<KvGroupStats> kv_groups;  // each KV cache group's pool after the last step
};

class AsyncEngine {
 public:
  explicit AsyncEngine(std::unique_ptr<Engine> engine);
  ~AsyncEngine();  // cancels what is left and joins the engine thread
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Runs Engine::submit on the engine thread and returns its verdict: the stream, or the
  // validation error (nothing queued).
  Result<std::shared_ptr<RequestStream>> submit(EngineRequest request);
  void cancel(RequestId id);
  // Runs Engine::reset_prefix_cache on the engine thread, after the submissions and
  // cancellations queued before it, and returns its verdict.
  Status reset_prefix_cache();
  // Cancels every request in flight (a shutdown's deadline): each stream ends with a cancelled
  // output before the engine's next step.
  void cancel_all();
  EngineSnapshot snapshot() const;
  // The engine's configuration and model; immutable after construction.
  const Engine& engine() const { return *engine_; }

 private:
  struct Submission {
    EngineRequest request;
    std::promise<Result<std::shared_ptr<RequestStream>>>* reply;
  };
  void run();
  void take_submissions(std::deque<Submission>& submissions);
  void step_once();

  std::unique_ptr<Engine> engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Submission> submissions_;
  std::vector<std::promise<Status>*> resets_;  // reset_prefix_cache calls waiting for the thread
  std::vector<RequestId> cancels_;
  bool cancel_all_ = false;
  bool stopping_ = false;
  EngineSnapshot snapshot_;
  std::map<RequestId, std::shared_ptr<RequestStream>> streams_;  // engine thread only
  std::thread thread_;
};

}  // namespace strata::server

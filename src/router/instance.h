#pragma once
// Instance: what the router knows about one `strata serve` behind it. Shared by the request
// threads, the health poller and the KV event thread: every field is an atomic or thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>

#include "router/backend_spec.h"
#include "router/connection_pool.h"
#include "router/prefix_index.h"

namespace strata::router {

struct Instance {
  Instance(BackendSpec s, bool is_prefill, std::chrono::milliseconds timeout)
      : spec(std::move(s)), prefill(is_prefill), connections(spec.url, timeout) {}

  BackendSpec spec;
  bool prefill;                           // a --prefill-backend (computes prompts only)
  ConnectionPool connections;             // keep-alive connections to it
  PrefixIndex index;                      // fed by the KV events
  std::atomic<bool> healthy{true};        // taken out on a failure, back when /health answers
  std::atomic<int64_t> in_flight{0};      // requests this router sent and not finished
  std::atomic<int64_t> reported_load{0};  // running + waiting, its /metrics' last answer
  std::atomic<int64_t> num_routed{0};     // requests sent to it (retries included)
  std::atomic<int64_t> num_failed{0};     // requests it failed (connect error, cut mid-way)
  std::atomic<int64_t> num_predicted_blocks{0};  // prompt blocks the index matched, summed
};

}  // namespace strata::router

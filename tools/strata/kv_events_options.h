#pragma once
// `strata serve`'s KV events flags (docs/kv-events.md), vLLM's names:
//   --kv-events-endpoint tcp://*:5557         publish the pool's KV events on a ZeroMQ PUB socket
//   --kv-events-replay-endpoint tcp://*:5558  answer replay requests on a ROUTER socket
//   --kv-events-topic T                       every message's first frame (default: empty)
//   --kv-events-buffer-steps N                batches kept for replay (default 10000)
//   --kv-events-config JSON                   vLLM's KVEventsConfig as JSON, instead of the above

#include <cstdint>
#include <string>

#include "strata/engine_config.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct KvEventsOptions {
  std::string endpoint;
  std::string replay_endpoint;
  std::string topic;
  int32_t buffer_steps = 10000;
  std::string config_json;  // --kv-events-config
};

void add_kv_events_options(CLI::App& cmd, KvEventsOptions& o);
// Sets c's kv_events_* fields from the flags; throws strata::Error (one line) on a bad endpoint,
// invalid JSON, an unknown or mistyped key, or --kv-events-config given with the other flags.
void apply_kv_events_options(const KvEventsOptions& o, EngineConfig& c);

}  // namespace strata::cli

#include "kv_events_options.h"

#include <CLI/CLI.hpp>

#include <limits>
#include <variant>

#include "core/error.h"
#include "core/json_input.h"
#include "core/quote.h"

namespace strata::cli {
namespace {

// vLLM's KVEventsConfig nests nothing; a little depth is plenty.
constexpr int kMaxConfigDepth = 4;

void check_endpoint(const std::string& flag, const std::string& endpoint) {
  for (const char* scheme : {"tcp://", "ipc://", "inproc://"}) {
    if (endpoint.starts_with(scheme) && endpoint.size() > std::string(scheme).size()) return;
  }
  throw Error(flag + " " + quote(endpoint) +
              ": expected tcp://HOST:PORT (tcp://*:PORT to listen), ipc://PATH or inproc://NAME");
}

std::string string_field(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string()) throw Error("--kv-events-config: " + key + " must be a string");
  return v.get<std::string>();
}

int32_t count_field(const nlohmann::json& v, const std::string& key, int64_t min) {
  if (!v.is_number_integer() || v.get<int64_t>() < min ||
      v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    throw Error("--kv-events-config: " + key + " must be an integer >= " + std::to_string(min));
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

// vLLM's KVEventsConfig: enable_kv_cache_events, publisher ("zmq" or "null"), endpoint,
// replay_endpoint, topic, buffer_steps, hwm, max_queue_size.
void apply_config_json(const std::string& text, EngineConfig& c) {
  std::variant<nlohmann::json, JsonInputError> parsed = parse_json_input(text, kMaxConfigDepth);
  if (const auto* e = std::get_if<JsonInputError>(&parsed)) {
    throw Error("--kv-events-config is not valid JSON: " + e->message);
  }
  const nlohmann::json& j = std::get<nlohmann::json>(parsed);
  if (!j.is_object()) throw Error("--kv-events-config must be a JSON object");
  bool enabled = false;
  std::string publisher = "zmq";
  std::string endpoint = "tcp://*:5557";
  for (const auto& [key, v] : j.items()) {
    if (key == "enable_kv_cache_events") {
      if (!v.is_boolean()) throw Error("--kv-events-config: " + key + " must be true or false");
      enabled = v.get<bool>();
    } else if (key == "publisher") {
      publisher = string_field(v, key);
      if (publisher != "zmq" && publisher != "null") {
        throw Error("--kv-events-config: publisher " + quote(publisher) +
                    " is not supported (zmq or null)");
      }
    } else if (key == "endpoint") {
      endpoint = string_field(v, key);
    } else if (key == "replay_endpoint") {
      c.kv_events_replay_endpoint = v.is_null() ? "" : string_field(v, key);
    } else if (key == "topic") {
      c.kv_events_topic = string_field(v, key);
    } else if (key == "buffer_steps") {
      c.kv_events_buffer_steps = count_field(v, key, 1);
    } else if (key == "hwm") {
      c.kv_events_hwm = count_field(v, key, 0);
    } else if (key == "max_queue_size") {
      c.kv_events_max_queue_batches = count_field(v, key, 1);
    } else {
      throw Error("--kv-events-config: unknown key " + quote(key) +
                  " (enable_kv_cache_events, publisher, endpoint, replay_endpoint, topic, "
                  "buffer_steps, hwm, max_queue_size)");
    }
  }
  if (!enabled || publisher == "null") {
    c.kv_events_replay_endpoint.clear();
    return;
  }
  check_endpoint("--kv-events-config endpoint", endpoint);
  if (!c.kv_events_replay_endpoint.empty()) {
    check_endpoint("--kv-events-config replay_endpoint", c.kv_events_replay_endpoint);
  }
  c.kv_events_endpoint = endpoint;
}

}  // namespace

void add_kv_events_options(CLI::App& cmd, KvEventsOptions& o) {
  cmd.add_option("--kv-events-endpoint", o.endpoint,
                 "Publish the prefix cache's KV events in vLLM's format on a ZeroMQ PUB socket "
                 "(tcp://*:5557 listens; docs/kv-events.md)");
  cmd.add_option("--kv-events-replay-endpoint", o.replay_endpoint,
                 "KV events: a ZeroMQ ROUTER socket answering requests for missed batches "
                 "(tcp://*:5558)");
  cmd.add_option("--kv-events-topic", o.topic, "KV events: the topic every message starts with");
  cmd.add_option("--kv-events-buffer-steps", o.buffer_steps,
                 "KV events: batches (steps) kept for replay")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  cmd.add_option("--kv-events-config", o.config_json,
                 "KV events as vLLM's JSON, e.g. '{\"enable_kv_cache_events\":true,"
                 "\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:5557\",\"replay_endpoint\":"
                 "\"tcp://*:5558\",\"topic\":\"\",\"buffer_steps\":10000,\"hwm\":100000}'");
}

void apply_kv_events_options(const KvEventsOptions& o, EngineConfig& c) {
  if (!o.config_json.empty()) {
    if (!o.endpoint.empty() || !o.replay_endpoint.empty() || !o.topic.empty()) {
      throw Error("--kv-events-config and the --kv-events-* flags exclude each other");
    }
    apply_config_json(o.config_json, c);
    return;
  }
  if (o.endpoint.empty()) {
    if (!o.replay_endpoint.empty() || !o.topic.empty()) {
      throw Error("--kv-events-replay-endpoint and --kv-events-topic need --kv-events-endpoint");
    }
    return;
  }
  check_endpoint("--kv-events-endpoint", o.endpoint);
  if (!o.replay_endpoint.empty()) check_endpoint("--kv-events-replay-endpoint", o.replay_endpoint);
  c.kv_events_endpoint = o.endpoint;
  c.kv_events_replay_endpoint = o.replay_endpoint;
  c.kv_events_topic = o.topic;
  c.kv_events_buffer_steps = o.buffer_steps;
}

}  // namespace strata::cli

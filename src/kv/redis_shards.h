#pragma once
// RedisShards: the remote KV tier's store over several independent Redis servers (no cluster),
// each key on one of them. The server is chosen by rendezvous (highest-random-weight) hashing:
// each server's weight for a key is XXH3 of the key seeded with XXH3 of the server's name
// ("host:port/db"), and the key lives on the heaviest. So
//   - every instance configured with the same servers places a key on the same one, whatever
//     order it lists them in (a server must be named the same way everywhere: "localhost" and
//     "127.0.0.1" are two names);
//   - adding an (N+1)th server moves only the keys it now wins, about 1/(N+1) of them, and
//     removing one moves only its own keys.
// Each server gets one RedisClient (its own timeout and breaker, redis_client.h).
//
//   mget(keys)    the keys grouped by server, each server's read as RedisClient::mget reads
//                 them (pipelined MGETs): one round trip per server holding some of the keys,
//                 the servers' at the same time (redis_fan_out.h), so a call takes its slowest
//                 server's round trip; one server holding them all is read on the calling thread
//   set_nx(pairs) the same with pipelined SET NX [EX ttl]
//   exists(keys)  the same with pipelined EXISTS
//
// The callbacks (each, written) run on the fan-out's threads, the calling thread among them, and
// one at a time (a mutex: never two calls at once, and each sees what the one before it wrote),
// each key's once, in no promised order: callers' callbacks need not be thread-safe, nor tied to
// the calling thread, and must not throw. mget's value is valid during its call only, so it is
// handed over there (RemoteTier decodes it into the caller's buffer), not collected.
//
// A server that does not answer (down, slow, its breaker open) fails only its own keys: they
// are left out of the answer and the call returns its Unavailable once every other server has
// answered (with several failing, the first in the servers' order).
//
// Not thread-safe (the tier keeps one per thread that talks to Redis). Cost: per call, as long as
// the slowest server's round trip, a pool wake-up when several servers hold keys, and N hashes
// per key.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/redis_client.h"
#include "kv/redis_fan_out.h"

namespace strata::kv {

class RedisShards final : public RedisStore {
 public:
  // servers: at least one, no two with the same name (the engine's configuration checks both).
  explicit RedisShards(std::vector<RedisEndpoint> servers, RedisClientOptions options = {});

  // The index in servers of the server that holds key.
  size_t server_of(std::string_view key) const;
  size_t num_servers() const { return clients_.size(); }
  const RedisClient& server(size_t i) const { return *clients_.at(i); }

  Status mget(std::span<const std::string> keys,
              const std::function<void(size_t, std::optional<std::string_view>)>& each,
              size_t chunk) override;
  Status set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                const std::function<void(size_t, bool)>& written) override;
  Status exists(std::span<const std::string> keys,
                const std::function<void(size_t, bool)>& each) override;

 private:
  // Key indices by server: by_server[s] lists, in order, the keys server s holds.
  template <typename KeyOf>
  std::vector<std::vector<size_t>> group(size_t num_keys, const KeyOf& key_of) const;
  // read(client, its keys, their indices in keys) for every server holding some of keys, the
  // servers' at the same time; the first failure in the servers' order.
  template <typename Read>
  Status per_server(std::span<const std::string> keys, const Read& read);

  std::vector<std::unique_ptr<RedisClient>> clients_;
  std::vector<uint64_t> seeds_;  // per server: XXH3 of its name
  RedisFanOut fan_out_;          // the servers' round trips of one call, at the same time
};

// "host:port/db": the name a server's weights are seeded with.
std::string shard_name(const RedisEndpoint& endpoint);

}  // namespace strata::kv

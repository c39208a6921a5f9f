#pragma once
// RedisCluster: the remote KV tier's store over a Redis Cluster (hiredis has no cluster support,
// so the routing is here, kept small). A key's hash slot is CRC16 (XMODEM, Boost.CRC) of the key
// -- or of its {hash tag} -- mod 16384; the slot map comes from CLUSTER SLOTS, asked of the seed
// nodes and then of any known master. Each master gets one RedisClient (its own timeout and
// breaker, redis_client.h).
//
//   mget(keys)    the keys grouped by master, pipelined GETs to each (MGET needs its keys in
//                 one slot): one round trip per master holding some of them, the masters' at
//                 the same time (redis_fan_out.h)
//   set_nx(pairs) the same with SET NX [EX ttl]
//   exists(keys)  the same with EXISTS
//
// A MOVED reply (the slot has moved for good) refreshes the slot map and retries the key at its
// new master; an ASK reply (a slot being migrated) sends ASKING and the command to the node
// named, once. At most two rounds of retries; keys still unanswered are left out (the tier treats
// them as misses). A master that does not answer fails only its own keys.
//
// The callbacks (each, written) run on the fan-out's threads, the calling thread among them, one
// call at a time (never two at once: a mutex), each key's once; they must not throw.
//
// Not thread-safe (the tier keeps one per thread that talks to Redis). Cost: per call, as long as
// the slowest master's round trip, plus one CLUSTER SLOTS per MOVED round.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/redis_client.h"
#include "kv/redis_fan_out.h"

namespace strata::kv {

class RedisCluster final : public RedisStore {
 public:
  static constexpr int kSlots = 16384;

  RedisCluster(std::vector<RedisEndpoint> seeds, RedisClientOptions options = {});

  // The key's hash slot: CRC16 of the key, or of the part inside its first non-empty {...}.
  static int slot_of(std::string_view key);

  Status mget(std::span<const std::string> keys,
              const std::function<void(size_t, std::optional<std::string_view>)>& each,
              size_t chunk) override;
  Status set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                const std::function<void(size_t, bool)>& written) override;
  Status exists(std::span<const std::string> keys,
                const std::function<void(size_t, bool)>& each) override;

  int64_t num_redirects() const { return num_redirects_; }  // MOVED and ASK replies followed

 private:
  // One command per key, sent to the key's master (or, on ASK, the node named), replies handed to
  // each(key index, reply); MOVED / ASK followed as above. Unavailable when some key got no
  // answer.
  Status route(size_t num_keys, const std::function<RedisClient::Command(size_t)>& command_of,
               std::span<const std::string_view> keys,
               const std::function<void(size_t, const RedisClient::ReplyView&)>& each,
               size_t window);
  Status refresh_slots();
  RedisClient& client(const RedisEndpoint& node);

  std::vector<RedisEndpoint> seeds_;
  RedisClientOptions options_;
  std::vector<std::unique_ptr<RedisClient>> clients_;  // one per node seen
  std::array<int32_t, kSlots> slot_client_{};          // index into clients_, -1 = unknown
  bool have_slots_ = false;
  int64_t num_redirects_ = 0;
  RedisFanOut fan_out_;  // the masters' pipelines of one round, at the same time
};

// Parses "MOVED <slot> <host>:<port>" / "ASK <slot> <host>:<port>" into the node; nullopt for any
// other error text.
std::optional<RedisEndpoint> redirect_target(std::string_view error, bool& ask);

}  // namespace strata::kv

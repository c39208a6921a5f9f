#pragma once
// RedisClient: one connection to a Redis server for the remote KV tier (remote_tier.h), over
// hiredis (libhiredis-dev) -- the few commands the tier uses, binary-safe, each bounded by a
// timeout, with a circuit breaker:
//
//   mget(keys, each)     one round trip (pipelined MGETs of a few keys each): each key's
//                        value, or nullopt where absent
//   set_nx(pairs, ttl)   SET key v NX [EX ttl] for each pair, pipelined: one round trip; each
//                        pair's answer: written, or the key was there
//   command(args)        any other command (tests, administration): the reply as text
//
// A call connects first when there is no connection. A connection or protocol error (a server
// down, killed, restarted or slower than the timeout) drops the connection and opens the
// breaker: for the next `backoff` no call touches the network (Unavailable at once), then one
// call tries to connect again; the backoff doubles on each failure up to max_backoff and resets
// on success. So a dead server costs a step nothing but a clock read, and a restarted one is
// found again.
//
// Not thread-safe: one thread uses a client (the tier keeps one per thread that talks to Redis).
// Cost: one round trip per call, at most `timeout` of waiting.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct iovec;
struct redisContext;

namespace strata::kv {

struct RedisEndpoint {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
};

// redis://HOST[:PORT][/DB] (PORT 6379 and DB 0 when left out). InvalidArgument naming what is
// wrong otherwise.
Result<RedisEndpoint> parse_redis_url(std::string_view url);

// A key and a value to write.
struct RedisKeyValue {
  std::string_view key;
  std::string_view value;
};

// What the remote tier needs of Redis: one server (RedisClient), a cluster (RedisCluster,
// redis_cluster.h) or independent servers sharing the keys (RedisShards, redis_shards.h). Not
// thread-safe.
class RedisStore {
 public:
  virtual ~RedisStore() = default;
  // each(i, value) for every key answered (in no promised order, each key once), value valid
  // during the call (nullopt: absent). The values come in reads of at most `chunk` keys.
  // Unavailable / Internal when the store could not answer for some keys: those are not passed
  // to each, and the others' answers stand.
  virtual Status mget(std::span<const std::string> keys,
                      const std::function<void(size_t, std::optional<std::string_view>)>& each,
                      size_t chunk) = 0;
  // Whether each key is there: each(i, there) for every key answered (EXISTS, pipelined; a few
  // bytes a key). Unavailable / Internal as mget for the keys not answered.
  virtual Status exists(std::span<const std::string> keys,
                        const std::function<void(size_t, bool)>& each) = 0;
  // SET NX [EX ttl] of every pair: written(i, true) where pairs[i] was written, (i, false) where
  // its key was there. Unavailable / Internal as mget for the pairs not answered (a server down,
  // or an error reply such as OOM): those are not passed to written.
  virtual Status set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                        const std::function<void(size_t, bool)>& written) = 0;
};

// One hash slot range of a Redis Cluster and the master serving it (CLUSTER SLOTS).
struct RedisSlotRange {
  int start = 0;
  int end = 0;  // inclusive
  RedisEndpoint master;
};

struct RedisClientOptions {
  std::chrono::milliseconds timeout{200};      // connect, and each reply
  std::chrono::milliseconds backoff{250};      // the breaker's first wait after a failure
  std::chrono::milliseconds max_backoff{8000};
};

class RedisClient final : public RedisStore {
 public:
  explicit RedisClient(RedisEndpoint endpoint, RedisClientOptions options = {});
  ~RedisClient() override;
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Unavailable while the breaker is open or when the server cannot be reached or answers too
  // late; Internal for an error reply.
  // Pipelined MGETs of at most `chunk` keys each, kMgetWindow of them in flight (a server with a
  // few MiB of replies queued sends at the link's rate; with tens of MiB, at a fraction of it):
  // each(i, value) for every key in order, value pointing into hiredis's read buffer (valid during
  // the call; nullopt where absent), no reply object built.
  Status mget(std::span<const std::string> keys,
              const std::function<void(size_t, std::optional<std::string_view>)>& each,
              size_t chunk) override;
  // By pipeline(): Internal for an error reply (that key not passed).
  Status exists(std::span<const std::string> keys,
                const std::function<void(size_t, bool)>& each) override;

  // ---- Redis Cluster: what RedisCluster asks of each node ---------------------------------------
  // A reply as pipeline() hands it over (text valid during the callback).
  struct ReplyView {
    enum class Kind : uint8_t { kString, kNil, kStatus, kError, kInteger, kOther };
    Kind kind = Kind::kOther;
    std::string_view text;
    int64_t integer = 0;
  };
  using Command = std::vector<std::string_view>;
  // Sends the commands, at most `window` unanswered at a time, and reads each reply in order:
  // each(i, reply). Unavailable / Internal for a connection or protocol error (no later reply
  // is handed over).
  Status pipeline(std::span<const Command> commands,
                  const std::function<void(size_t, const ReplyView&)>& each,
                  size_t window = SIZE_MAX);
  // CLUSTER SLOTS: every slot range and its master (an empty host in the reply means this node).
  Result<std::vector<RedisSlotRange>> cluster_slots();
  // By pipeline(): written(i, ...) for each pair answered with OK or nil; Internal for an error
  // reply (that pair not passed), Unavailable / Internal as pipeline() for the rest.
  Status set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                const std::function<void(size_t, bool)>& written) override;
  // The reply as text: a status or string as it is, an integer in decimal, nil as "(nil)", an
  // array's elements joined by newlines.
  Result<std::string> command(std::span<const std::string_view> args);

  static constexpr size_t kMgetWindow = 2;

  bool connected() const { return ctx_ != nullptr; }
  const RedisEndpoint& endpoint() const { return endpoint_; }
  int64_t num_failures() const { return num_failures_; }     // calls the network failed
  int64_t num_short_circuited() const { return num_skipped_; }  // calls the breaker refused

 private:
  struct ContextFree {
    void operator()(redisContext* c) const;
  };
  // Connects (and SELECTs the db) unless connected; Unavailable while the breaker is open.
  Status ensure_connected();
  // Queues args as one command; reads the next reply into *reply (a redisReply*, the caller frees
  // it); both together.
  Status append(std::span<const std::string_view> args);
  Status read_reply(void** reply);
  // Sends the buffers in order, after what hiredis has queued; iov is consumed.
  Status send_all(std::span<struct iovec> iov);
  Status round_trip(std::span<const std::string_view> args, void** reply);
  // Drops the connection and opens the breaker.
  Status fail(const std::string& what);

  RedisEndpoint endpoint_;
  RedisClientOptions options_;
  std::unique_ptr<redisContext, ContextFree> ctx_;
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_;
  int64_t num_failures_ = 0;
  int64_t num_skipped_ = 0;
};

// SET key value NX, with EX ttl unless ttl is "0": the command both stores write with.
RedisClient::Command set_nx_command(const RedisKeyValue& kv, const std::string& ttl);
// EXISTS's reply for key i, as both stores take it: each(i, there), or an error reply kept in
// refused (the first one) and the key not passed.
void take_exists_reply(size_t i, const RedisClient::ReplyView& r,
                       const std::function<void(size_t, bool)>& each, Status& refused);

}  // namespace strata::kv

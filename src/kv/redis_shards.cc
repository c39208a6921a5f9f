#include "kv/redis_shards.h"

#include <xxhash.h>

#include <utility>

#include "core/check.h"

namespace strata::kv {
namespace {

// The servers holding some of the keys, in order.
std::vector<size_t> holding(const std::vector<std::vector<size_t>>& by_server) {
  std::vector<size_t> servers;
  for (size_t s = 0; s < by_server.size(); ++s) {
    if (!by_server[s].empty()) servers.push_back(s);
  }
  return servers;
}

}  // namespace

std::string shard_name(const RedisEndpoint& endpoint) {
  return endpoint.host + ":" + std::to_string(endpoint.port) + "/" + std::to_string(endpoint.db);
}

RedisShards::RedisShards(std::vector<RedisEndpoint> servers, RedisClientOptions options) {
  STRATA_CHECK(!servers.empty(), "RedisShards needs at least one server");
  for (RedisEndpoint& ep : servers) {
    const std::string name = shard_name(ep);
    seeds_.push_back(XXH3_64bits(name.data(), name.size()));
    clients_.push_back(std::make_unique<RedisClient>(std::move(ep), options));
  }
}

size_t RedisShards::server_of(std::string_view key) const {
  size_t best = 0;
  uint64_t best_weight = 0;
  for (size_t s = 0; s < seeds_.size(); ++s) {
    const uint64_t w = XXH3_64bits_withSeed(key.data(), key.size(), seeds_[s]);
    // A tie (two equal 64-bit weights) goes to the smaller seed, so the list's order never
    // decides.
    if (s == 0 || w > best_weight || (w == best_weight && seeds_[s] < seeds_[best])) {
      best = s;
      best_weight = w;
    }
  }
  return best;
}

template <typename KeyOf>
std::vector<std::vector<size_t>> RedisShards::group(size_t num_keys, const KeyOf& key_of) const {
  std::vector<std::vector<size_t>> by_server(clients_.size());
  for (size_t i = 0; i < num_keys; ++i) by_server[server_of(key_of(i))].push_back(i);
  return by_server;
}

template <typename Read>
Status RedisShards::per_server(std::span<const std::string> keys, const Read& read) {
  const std::vector<std::vector<size_t>> by_server =
      group(keys.size(), [&](size_t i) -> std::string_view { return keys[i]; });
  const std::vector<size_t> servers = holding(by_server);
  return fan_out_.run(servers.size(), [&](size_t k) {
    const size_t s = servers[k];
    const std::vector<size_t>& indices = by_server[s];
    std::vector<std::string> mine;
    mine.reserve(indices.size());
    for (const size_t i : indices) mine.push_back(keys[i]);
    return read(*clients_[s], mine, indices);
  });
}

Status RedisShards::mget(std::span<const std::string> keys,
                         const std::function<void(size_t, std::optional<std::string_view>)>& each,
                         size_t chunk) {
  return per_server(keys, [&](RedisClient& c, std::span<const std::string> mine,
                              const std::vector<size_t>& indices) {
    return c.mget(
        mine,
        [&](size_t j, std::optional<std::string_view> v) {
          fan_out_.serialized([&] { each(indices[j], v); });
        },
        chunk);
  });
}

Status RedisShards::exists(std::span<const std::string> keys,
                           const std::function<void(size_t, bool)>& each) {
  return per_server(keys, [&](RedisClient& c, std::span<const std::string> mine,
                              const std::vector<size_t>& indices) {
    return c.exists(
        mine, [&](size_t j, bool there) { fan_out_.serialized([&] { each(indices[j], there); }); });
  });
}

Status RedisShards::set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                           const std::function<void(size_t, bool)>& written) {
  const std::vector<std::vector<size_t>> by_server =
      group(pairs.size(), [&](size_t i) { return pairs[i].key; });
  const std::vector<size_t> servers = holding(by_server);
  return fan_out_.run(servers.size(), [&](size_t k) {
    const size_t s = servers[k];
    const std::vector<size_t>& indices = by_server[s];
    std::vector<RedisKeyValue> mine;
    mine.reserve(indices.size());
    for (const size_t i : indices) mine.push_back(pairs[i]);
    return clients_[s]->set_nx(mine, ttl_seconds, [&](size_t j, bool w) {
      fan_out_.serialized([&] { written(indices[j], w); });
    });
  });
}

}  // namespace strata::kv

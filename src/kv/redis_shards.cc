#include "kv/redis_shards.h"

#include <xxhash.h>

#include <utility>

#include "core/check.h"

namespace strata::kv {

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

Status RedisShards::mget(std::span<const std::string> keys,
                         const std::function<void(size_t, std::optional<std::string_view>)>& each,
                         size_t chunk) {
  const std::vector<std::vector<size_t>> by_server =
      group(keys.size(), [&](size_t i) -> std::string_view { return keys[i]; });
  Status error;
  std::vector<std::string> mine;
  for (size_t s = 0; s < clients_.size(); ++s) {
    const std::vector<size_t>& indices = by_server[s];
    if (indices.empty()) continue;
    mine.clear();
    for (const size_t i : indices) mine.push_back(keys[i]);
    const Status st = clients_[s]->mget(
        mine, [&](size_t j, std::optional<std::string_view> v) { each(indices[j], v); }, chunk);
    if (!st.ok() && error.ok()) error = st;
  }
  return error;
}

Status RedisShards::set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                           const std::function<void(size_t, bool)>& written) {
  const std::vector<std::vector<size_t>> by_server =
      group(pairs.size(), [&](size_t i) { return pairs[i].key; });
  Status error;
  std::vector<RedisKeyValue> mine;
  for (size_t s = 0; s < clients_.size(); ++s) {
    const std::vector<size_t>& indices = by_server[s];
    if (indices.empty()) continue;
    mine.clear();
    for (const size_t i : indices) mine.push_back(pairs[i]);
    const Status st =
        clients_[s]->set_nx(mine, ttl_seconds, [&](size_t j, bool w) { written(indices[j], w); });
    if (!st.ok() && error.ok()) error = st;
  }
  return error;
}

}  // namespace strata::kv

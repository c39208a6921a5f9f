#include "kv/redis_cluster.h"

#include <boost/crc.hpp>

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>

namespace strata::kv {

std::optional<RedisEndpoint> redirect_target(std::string_view error, bool& ask) {
  ask = error.starts_with("ASK ");
  if (!ask && !error.starts_with("MOVED ")) return std::nullopt;
  const size_t space = error.rfind(' ');
  const std::string_view node = error.substr(space + 1);
  const size_t colon = node.rfind(':');
  if (space == std::string_view::npos || colon == std::string_view::npos) return std::nullopt;
  RedisEndpoint ep;
  ep.host = std::string(node.substr(0, colon));
  const std::string_view port = node.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), ep.port);
  if (ec != std::errc() || end != port.data() + port.size()) return std::nullopt;
  return ep;
}

RedisCluster::RedisCluster(std::vector<RedisEndpoint> seeds, RedisClientOptions options)
    : seeds_(std::move(seeds)), options_(options) {
  slot_client_.fill(-1);
}

int RedisCluster::slot_of(std::string_view key) {
  if (const size_t open = key.find('{'); open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  boost::crc_optimal<16, 0x1021, 0, 0, false, false> crc;  // CRC16-CCITT (XMODEM), as Redis
  crc.process_bytes(key.data(), key.size());
  return static_cast<int>(crc.checksum() % kSlots);
}

RedisClient& RedisCluster::client(const RedisEndpoint& node) {
  for (const std::unique_ptr<RedisClient>& c : clients_) {
    if (c->endpoint().host == node.host && c->endpoint().port == node.port) return *c;
  }
  clients_.push_back(std::make_unique<RedisClient>(node, options_));
  return *clients_.back();
}

Status RedisCluster::refresh_slots() {
  std::vector<RedisEndpoint> ask = seeds_;
  for (const std::unique_ptr<RedisClient>& c : clients_) ask.push_back(c->endpoint());
  Status last = Status::Unavailable("redis cluster: no seed node");
  for (const RedisEndpoint& node : ask) {
    Result<std::vector<RedisSlotRange>> ranges = client(node).cluster_slots();
    if (!ranges.ok()) {
      last = ranges.status();
      continue;
    }
    slot_client_.fill(-1);
    for (const RedisSlotRange& r : *ranges) {
      RedisClient& master = client(r.master);
      const auto index = static_cast<int32_t>(
          std::find_if(clients_.begin(), clients_.end(),
                       [&](const std::unique_ptr<RedisClient>& c) { return c.get() == &master; }) -
          clients_.begin());
      for (int s = std::max(r.start, 0); s <= std::min(r.end, kSlots - 1); ++s) {
        slot_client_[static_cast<size_t>(s)] = index;
      }
    }
    have_slots_ = true;
    return Status::Ok();
  }
  return last;
}

Status RedisCluster::route(size_t num_keys,
                           const std::function<RedisClient::Command(size_t)>& command_of,
                           std::span<const std::string_view> keys,
                           const std::function<void(size_t, const RedisClient::ReplyView&)>& each,
                           size_t window) {
  if (num_keys == 0) return Status::Ok();
  if (!have_slots_) STRATA_RETURN_IF_ERROR(refresh_slots());
  std::vector<size_t> pending(num_keys);
  for (size_t i = 0; i < num_keys; ++i) pending[i] = i;
  std::vector<std::optional<RedisEndpoint>> ask_at(num_keys);
  Status error;
  for (int round = 0; round < 3 && !pending.empty(); ++round) {
    // The keys by the node that gets their command this round.
    std::map<RedisClient*, std::vector<size_t>> by_node;
    for (const size_t i : pending) {
      const int32_t c = slot_client_[static_cast<size_t>(slot_of(keys[i]))];
      if (ask_at[i]) {
        by_node[&client(*ask_at[i])].push_back(i);
      } else if (c >= 0) {
        by_node[clients_[static_cast<size_t>(c)].get()].push_back(i);
      } else {
        error = Status::Unavailable("redis cluster: no master serves a key's slot");
      }
    }
    std::vector<std::pair<RedisClient*, std::vector<size_t>>> nodes(by_node.begin(), by_node.end());
    std::vector<size_t> retry;
    bool moved = false;
    // Each node's pipeline on a thread of its own; the replies go through one mutex, so retry,
    // ask_at, moved, num_redirects_ and the caller's each are touched by one reply at a time.
    const Status s = fan_out_.run(nodes.size(), [&](size_t k) {
      const std::vector<size_t>& indices = nodes[k].second;
      std::vector<RedisClient::Command> commands;
      std::vector<size_t> key_of;  // per command; SIZE_MAX for an ASKING before it
      for (const size_t i : indices) {
        if (ask_at[i]) {
          commands.push_back({"ASKING"});
          key_of.push_back(SIZE_MAX);
          ask_at[i].reset();
        }
        commands.push_back(command_of(i));
        key_of.push_back(i);
      }
      return nodes[k].first->pipeline(
          commands,
          [&](size_t j, const RedisClient::ReplyView& r) {
            const size_t i = key_of[j];
            if (i == SIZE_MAX) return;
            fan_out_.serialized([&] {
              if (r.kind == RedisClient::ReplyView::Kind::kError) {
                bool ask = false;
                if (std::optional<RedisEndpoint> to = redirect_target(r.text, ask)) {
                  ++num_redirects_;
                  if (ask) {
                    ask_at[i] = std::move(to);
                  } else {
                    moved = true;
                  }
                  retry.push_back(i);
                  return;
                }
              }
              each(i, r);
            });
          },
          window);
    });
    if (!s.ok()) error = s;
    if (moved) {
      const Status refreshed = refresh_slots();
      if (!refreshed.ok()) error = refreshed;
    }
    pending = std::move(retry);
  }
  if (!pending.empty() && error.ok()) {
    error = Status::Unavailable("redis cluster: keys still redirected after three rounds");
  }
  return error;
}

Status RedisCluster::mget(std::span<const std::string> keys,
                          const std::function<void(size_t, std::optional<std::string_view>)>& each,
                          size_t chunk) {
  std::vector<std::string_view> views(keys.begin(), keys.end());
  return route(
      keys.size(), [&](size_t i) { return RedisClient::Command{"GET", views[i]}; }, views,
      [&](size_t i, const RedisClient::ReplyView& r) {
        each(i, r.kind == RedisClient::ReplyView::Kind::kString
                    ? std::optional<std::string_view>(r.text)
                    : std::nullopt);
      },
      // As many values in flight as a single server's MGETs have.
      std::max<size_t>(1, chunk) * RedisClient::kMgetWindow);
}

Status RedisCluster::exists(std::span<const std::string> keys,
                            const std::function<void(size_t, bool)>& each) {
  std::vector<std::string_view> views(keys.begin(), keys.end());
  Status refused;
  const Status s = route(
      keys.size(),
      [&](size_t i) {
        return RedisClient::Command{"EXISTS", views[i]};
      },
      views,
      [&](size_t i, const RedisClient::ReplyView& r) { take_exists_reply(i, r, each, refused); },
      SIZE_MAX);
  return s.ok() ? refused : s;
}

Status RedisCluster::set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                            const std::function<void(size_t, bool)>& written) {
  std::vector<std::string_view> keys;
  keys.reserve(pairs.size());
  for (const RedisKeyValue& kv : pairs) keys.push_back(kv.key);
  const std::string ttl = std::to_string(std::max<int64_t>(ttl_seconds, 0));
  Status refused;
  const Status s = route(
      pairs.size(),
      [&](size_t i) { return set_nx_command(pairs[i], ttl); },
      keys,
      [&](size_t i, const RedisClient::ReplyView& r) {
        if (r.kind == RedisClient::ReplyView::Kind::kError) {
          if (refused.ok()) refused = Status::Internal("redis SET: " + std::string(r.text));
          return;
        }
        written(i, r.kind == RedisClient::ReplyView::Kind::kStatus);
      },
      SIZE_MAX);
  return s.ok() ? refused : s;
}

}  // namespace strata::kv

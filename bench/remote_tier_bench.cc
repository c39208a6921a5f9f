// The remote KV tier's write and read rates against a Redis server (docs/benchmarks.md, "The
// remote tier"): N blocks written through RemoteTier::put (encoded, queued, written by the writer
// thread with pipelined SET NX) until flush() returns, then read back through RemoteTier::get in
// MGETs of --batch blocks, every value checked (header, namespace, chain hash, token ids,
// checksum) and decoded out as the engine does. The blocks hold BF16 values like a layer's K;
// --codec codes them as the tier's values (kv_codec.h). GB/s count the values' stored size
// (a block's raw bytes, header and token ids), whatever the codec sent. The peer,
// redis-benchmark with the same value size in the same run, is tools/bench/bench_remote_tier.sh's.
//
// Usage: strata_remote_tier_bench --url redis://HOST:PORT [--url ...] [--blocks N]
//                                 [--block-bytes B] [--batch M] [--json]
// Several --url: independent servers sharing the blocks (redis_shards.h), as the engine's
// --kv-remote-url list. Every database is flushed first (FLUSHDB): point it at scratch servers.

#include <CLI/CLI.hpp>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "guarded_main.h"
#include "kv/block_hash.h"
#include "kv/kv_codec.h"
#include "kv/redis_client.h"
#include "kv/remote_tier.h"
#include "kv/tier_key.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kBlockSize = 16;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int run(int argc, char** argv) {
  CLI::App app("The remote KV tier's write and read rates");
  std::vector<std::string> urls;
  int32_t blocks = 256;
  int64_t block_bytes = int64_t{2} << 20;
  int32_t batch = 32;
  std::string codec = "stored";
  size_t segment_bytes = 32768;
  bool json = false;
  app.add_option("--url", urls, "redis://HOST:PORT of a scratch server; repeated: shards")
      ->required();
  app.add_option("--blocks", blocks)->check(CLI::Range(1, 1 << 20));
  app.add_option("--block-bytes", block_bytes)->check(CLI::Range(int64_t{64}, int64_t{1} << 30));
  app.add_option("--batch", batch, "blocks per MGET")->check(CLI::Range(1, 4096));
  app.add_option("--codec", codec, "how values hold the block: stored, split or zstd");
  app.add_option("--segment-bytes", segment_bytes,
                 "split: bytes of one layer's K or V (the 8B shape's: 32768)");
  app.add_flag("--json", json);
  CLI11_PARSE(app, argc, argv);

  strata::kv::RedisTarget target;
  strata::kv::RedisClientOptions client{.timeout = std::chrono::milliseconds(5000)};
  for (const std::string& url : urls) {
    const strata::Result<strata::kv::RedisEndpoint> ep = strata::kv::parse_redis_url(url);
    if (!ep.ok()) throw std::runtime_error(ep.status().message());
    strata::kv::RedisClient admin(*ep, client);
    const std::string_view flush[] = {"FLUSHDB"};
    if (!admin.command(flush).ok()) throw std::runtime_error("FLUSHDB failed: no server at " + url);
    target.nodes.push_back(*ep);
  }
  strata::kv::RemoteTierOptions options;
  options.client = client;
  options.max_queued_bytes = int64_t{1} << 40;
  const std::optional<strata::kv::KvCodecScheme> scheme = strata::kv::parse_codec_scheme(codec);
  if (!scheme) throw std::runtime_error("unknown --codec " + codec);
  options.codec = strata::kv::KvCodecPlan{.scheme = *scheme, .segment_bytes = segment_bytes};
  strata::kv::RemoteTier tier(target, /*ns=*/7, kBlockSize, block_bytes, options);

  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(blocks));
  std::vector<strata::kv::BlockHash> hashes;
  std::vector<std::byte> bytes(static_cast<size_t>(block_bytes));
  // BF16 values like a layer's K: normal, each channel its own scale.
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const float x = normal(rng) * (0.05F + static_cast<float>((i / 2) % 128) / 64.0F);
    const auto b16 = static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
    std::memcpy(bytes.data() + i, &b16, 2);
  }
  const uint64_t checksum = strata::kv::tier_checksum(bytes);
  strata::kv::BlockHasher hasher;
  for (int32_t b = 0; b < blocks; ++b) {
    auto& t = tokens[static_cast<size_t>(b)];
    for (int32_t k = 0; k < kBlockSize; ++k) t.push_back(b * kBlockSize + k);
    hashes.push_back(hasher.hash(b == 0 ? nullptr : &hashes.back(), t, {}));
  }

  const auto put_start = Clock::now();
  for (int32_t b = 0; b < blocks; ++b) {
    if (!tier.put(hashes[static_cast<size_t>(b)], tokens[static_cast<size_t>(b)], bytes,
                  checksum)) {
      throw std::runtime_error("a put was dropped");
    }
  }
  tier.flush();
  const double put_s = seconds_since(put_start);
  if (tier.stats().num_writes != blocks) throw std::runtime_error("not every block was written");

  std::vector<std::vector<std::byte>> out(static_cast<size_t>(batch),
                                          std::vector<std::byte>(static_cast<size_t>(block_bytes)));
  const auto get_start = Clock::now();
  for (int32_t first = 0; first < blocks; first += batch) {
    std::vector<strata::kv::RemoteTier::Get> gets;
    for (int32_t b = first; b < std::min(blocks, first + batch); ++b) {
      gets.push_back({hashes[static_cast<size_t>(b)],
                      tokens[static_cast<size_t>(b)],
                      out[static_cast<size_t>(b - first)],
                      0,
                      {}});
    }
    tier.get(gets);
    for (const auto& g : gets) {
      if (!g.status.ok()) throw std::runtime_error("a read failed: " + g.status.to_string());
    }
  }
  const double get_s = seconds_since(get_start);

  const double value_bytes = static_cast<double>(tier.value_bytes()) * blocks;
  const double put_gbs = value_bytes / put_s / 1e9;
  const double get_gbs = value_bytes / get_s / 1e9;
  if (json) {
    const nlohmann::json j = {{"servers", urls.size()},
                              {"blocks", blocks},
                              {"block_bytes", block_bytes},
                              {"value_bytes", tier.value_bytes()},
                              {"batch", batch},
                              {"put_seconds", put_s},
                              {"put_gb_per_s", put_gbs},
                              {"get_seconds", get_s},
                              {"get_gb_per_s", get_gbs},
                              {"codec", codec},
                              {"bytes_written", tier.stats().bytes_written}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "| %d blocks of %lld bytes (values %zu), %zu servers | seconds | GB/s |\n"
        "|---|---|---|\n",
        blocks, static_cast<long long>(block_bytes), tier.value_bytes(), urls.size());
    std::printf("| put (pipelined SET NX), until flushed | %.3f | %.2f |\n", put_s, put_gbs);
    std::printf("| get (MGET of %d, checked) | %.3f | %.2f |\n", batch, get_s, get_gbs);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_remote_tier_bench", run, argc, argv);
}

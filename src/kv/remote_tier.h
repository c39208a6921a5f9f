#pragma once
// RemoteTier: KV blocks in Redis -- one server, independent servers sharing the blocks, or a
// cluster -- that several instances share (docs/kv.md, "The remote tier"). A block is stored under
// its TierKey -- the namespace (model, KV dtype, block size, group spec, layout version:
// tier_namespace) and the chain hash, which holds the whole prefix and the tenant salt -- as
//
//   key    strata:kv:<namespace, 16 hex digits>:<chain hash, 64 hex digits>
//   value  the block as a self-checking value (block_value.h: header, token ids, the bytes as a
//          KV codec stream as RemoteTierOptions::codec says), which every read checks whole
//          before the bytes are used: anything else (a truncated or overwritten value, another
//          block's value under the key) is a miss, counted as bad, never a wrong block.
//
//   get(blocks)   one round trip for the whole list (per server or cluster master holding
//                 some, all at the same time), on the caller's connection: pipelined MGETs of
//                 up to 2 MiB of values each (at least one value); a server that does not
//                 answer fails only its own blocks
//   put(block)    queued for the writer thread, which writes what is queued, pipelined (up to 64
//                 blocks or 16 MiB a round trip, split over the servers or masters, whose
//                 pipelines run at the same time): it asks which of the keys are there
//                 (EXISTS) and codes (kv_codec.h) and sends only the others, with SET NX (a
//                 block already there is never written again) and the TTL; when the queued
//                 bytes would pass their bound, or the last round trip got no answer at all (the
//                 store is retried by one write at a time), the put is dropped and counted
//                 instead of blocking the caller; a server that does not answer fails only its
//                 own blocks' writes. put_borrowed() queues the caller's bytes as they are, without
//                 a copy: the writer codes the value from them and hands their tag back
//                 (take_released) before it sends it
//
// Capacity and eviction are the server's (maxmemory with allkeys-lru), plus the optional TTL.
// Every call is bounded by the client's timeout; a dead server is asked again only after its
// breaker's backoff (redis_client.h).
//
// Owns two stores (get's caller's, the writer's: a connection each, or one per server or
// cluster master) and the writer thread; times each get() and each batch's write (stats()).
// get() from one thread at a time; put(), put_borrowed(), take_released(), flush() and stats()
// from any. Cost: get decodes each value once (a copy, for stored values); put copies the block
// once on the caller's thread, and its writer codes it again (when the codec is not stored);
// put_borrowed copies nothing on the caller's thread: the writer codes (or copies) the block once.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/block_sink.h"
#include "kv/block_source.h"
#include "kv/block_value.h"
#include "kv/kv_codec.h"
#include "kv/redis_client.h"
#include "kv/value_buffer_pool.h"
#include "strata/latency_histogram.h"

namespace strata::kv {

// Where the blocks live: one server; several independent servers, each block on one of them
// (redis_shards.h); or, with cluster, a Redis Cluster's seed nodes (redis_cluster.h).
struct RedisTarget {
  std::vector<RedisEndpoint> nodes;  // at least one
  bool cluster = false;
};

struct RemoteTierOptions {
  RedisClientOptions client;
  int64_t ttl_seconds = 0;                        // 0: keys live until Redis evicts them
  int64_t max_queued_bytes = int64_t{256} << 20;  // writes waiting for the writer thread
  // How the values hold the block's bytes (kv_codec.h): stored by default; KvTiers picks what
  // pays for the pool's dtype (docs/kv-codec.md).
  KvCodecPlan codec = {};
};

struct RemoteTierStats {
  int64_t num_get_blocks = 0;    // blocks asked for
  int64_t num_hits = 0;          // found and verified
  int64_t num_bad = 0;           // found but failing a check (treated as misses)
  int64_t num_get_errors = 0;    // get calls that failed (no answer in time, breaker open)
  int64_t num_writes = 0;        // blocks written
  int64_t num_present = 0;       // puts that found the block there already (EXISTS or SET NX)
  int64_t num_dropped = 0;       // puts dropped: queue full, or the server not answering
  int64_t num_put_errors = 0;    // writes the server refused or did not answer
  int64_t bytes_read = 0;        // values received
  int64_t bytes_written = 0;     // values written (not those SET NX found there)
  LatencyHistogram get_latency;  // each get() call, answered or not
  LatencyHistogram put_latency;  // each batch the writer writes (its EXISTS and SET round trips)
};

class RemoteTier final : public BlockSource, public BlockSink {
 public:
  RemoteTier(const RedisTarget& target, uint64_t ns, int32_t block_size, int64_t block_bytes,
             RemoteTierOptions options = {});
  RemoteTier(const RedisEndpoint& endpoint, uint64_t ns, int32_t block_size, int64_t block_bytes,
             RemoteTierOptions options = {})
      : RemoteTier(RedisTarget{{endpoint}, false}, ns, block_size, block_bytes,
                   std::move(options)) {}
  ~RemoteTier() override;  // the writer finishes what is queued (each write bounded by the timeout)
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // Split values without given codebooks: blocks coded with their own before each writer fixes
  // one codebook per segment from their histograms.
  static constexpr int kCalibrationBlocks = 16;
  // The longest value: a stored block's (a coded one is shorter).
  size_t value_bytes() const;
  // The values' form (block_value.h), with the codec options() gave.
  const BlockValueFormat& format() const { return format_; }

  std::string key(const BlockHash& hash) const;

  // Two round trips (per server or cluster master holding some of the blocks): which of the keys
  // the store holds, then the values of each chain (BlockGet::chain) up to its first absent
  // block; the blocks past it are NotFound without being read. A block a server did not answer
  // for is Unavailable.
  using Get = BlockGet;
  void get(std::span<Get> blocks) override;

  // Queues (hash, tokens, bytes) for writing; false when dropped.
  bool put(const BlockHash& hash, std::span<const int32_t> tokens, std::span<const std::byte> bytes,
           uint64_t checksum);
  // The same without a copy (BlockSink): the writer codes the value and hands tag back.
  bool put_borrowed(const BlockHash& hash, std::span<const int32_t> tokens,
                    std::span<const std::byte> bytes, uint64_t checksum, uint64_t tag) override;
  std::vector<uint64_t> take_released(bool wait = false) override;
  // Waits until every queued write is done (or failed).
  void flush();

  RemoteTierStats stats() const;

  // The blocks the writer has written, or found there already, kept from the first call on
  // until take_stored() (the KV events of the remote medium). The server's own evictions are
  // not seen.
  void log_stored();
  std::vector<BlockHash> take_stored();

 private:
  // The blocks get() reads, in order: each chain's up to its first block the store does not hold
  // (one EXISTS round trip; with one block, or a probe that fails, all of them). Those past that
  // block, and it, get NotFound here.
  std::vector<size_t> probe_chains(std::span<const std::string> keys, std::span<Get> blocks);
  void run_writer();
  // A write round trip takes at most this many blocks, and stops adding them past this many bytes.
  static constexpr size_t kWriteBatch = 64;
  // A read's MGETs each ask for at most this many bytes of values (at least one block).
  static constexpr size_t kReadChunkBytes = size_t{2} << 20;
  static constexpr int64_t kWriteBatchBytes = int64_t{16} << 20;

  uint64_t ns_;
  int64_t block_bytes_;
  RemoteTierOptions options_;
  BlockValueFormat format_;
  std::unique_ptr<RedisStore> reader_;
  std::unique_ptr<RedisStore> writer_client_;

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable work_cv_, idle_cv_;
  struct Write {
    std::string key;
    std::string value;  // a stored value (put); empty when borrowed
    int64_t queued_bytes = 0;  // what it counts against max_queued_bytes while queued
    // put_borrowed: the block, coded into a value by the writer.
    bool borrowed = false;
    uint64_t tag = 0;
    BlockHash hash;
    std::span<const int32_t> tokens;
    std::span<const std::byte> bytes;
    uint64_t checksum = 0;
  };
  bool enqueue(Write w);  // false: dropped (counted)
  std::deque<Write> queue_;
  // Written values' buffers, for the next puts to encode into (fresh 2 MiB allocations cost more
  // in page faults than the copy into them): at most 64 values' worth.
  ValueBufferPool spare_;
  int64_t queued_bytes_ = 0;
  LentTags lent_;  // borrowed blocks (put_borrowed), for take_released
  bool writing_ = false;
  bool writer_unavailable_ = false;  // the last write found the server not answering
  bool stopping_ = false;
  RemoteTierStats stats_;
  bool log_stored_ = false;
  std::vector<BlockHash> stored_;  // since the last take_stored(), while log_stored_
  std::thread writer_;
};

}  // namespace strata::kv

#pragma once
// KvTiers: the KV tiers under one cache's pool -- host memory, then local disk -- and how blocks
// move between them and the pool (docs/kv.md, "KV tiers"):
//
//   down  the pool evicts a cached block (BlockPool's EvictionListener): before allocate()
//         returns, the block's bytes go to the host tier (BlockMover::to_host) under its
//         TierKey, unless the tier has it already (a block is written down once); a block the
//         host tier drops to make room is written to the disk tier first
//   up    promote(tokens, hit): the request's chain of full blocks past its pool prefix hit
//         (KvCacheManager::find_cached_prefix), block by block from the host tier, else from
//         disk (read into a host slot: disk -> host), into freshly allocated pool blocks
//         (BlockMover::from_host), registered in the prefix cache as if computed and appended
//         to the hit, so the admission and every later step are the pool prefix hit the engine
//         already runs
//
// Every block is confirmed by its token ids and its checksum before it goes up; a missing,
// truncated or corrupt block, or an I/O error, ends the promotion there (that block and its
// successors are recomputed) and is counted. Caches of one group only (group 0, full attention).
//
// Owns the tiers; borrows the cache manager and the pool's mover, which must outlive it, and
// sets itself as the pool's eviction listener for its lifetime. Not thread-safe: the scheduler
// thread calls both directions. Cost: one BlockMover copy per batch of blocks moved
// (synchronous), one checksum per block moved (on up to 8 threads), one file per block written
// or read.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/block_mover.h"
#include "kv/disk_tier.h"
#include "kv/host_tier.h"
#include "kv/kv_cache_manager.h"
#include "kv/tier_key.h"

namespace strata::kv {

struct KvTierConfig {
  int64_t host_bytes = 0;  // --kv-offload-bytes: > 0 enables the tiers
  std::string disk_path;   // --kv-disk-path: empty = no disk tier
  int64_t disk_bytes = 0;  // --kv-disk-bytes
  uint64_t ns = 0;         // tier_namespace of the cache
};

struct KvTierStats {
  int64_t num_offloaded_blocks = 0;  // evicted pool blocks written to the host tier
  int64_t num_disk_writes = 0;       // host blocks written down to disk
  int64_t num_host_hit_blocks = 0;   // blocks promoted from the host tier
  int64_t num_disk_hit_blocks = 0;   // blocks promoted from disk
  int64_t num_faults = 0;            // blocks that failed a check or an I/O (then recomputed)
};

class KvTiers final : public EvictionListener {
 public:
  // InvalidArgument for a config the cache cannot take (more than one group, prefix caching
  // off, a host tier smaller than one block, a disk tier without a host tier) or a disk
  // directory that cannot be opened.
  static Result<std::unique_ptr<KvTiers>> create(const KvTierConfig& config, KvCacheManager& cache,
                                                 BlockMover& mover);
  ~KvTiers() override;
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  void on_evicted(std::span<const EvictedBlock> blocks) override;

  // Brings the chain of tokens' full blocks (leaving the last token, as find_cached_prefix does)
  // that follows hit -- find_cached_prefix's for these tokens and keys, in this same scheduling
  // decision -- up from the tiers as far as it continues unbroken, and extends hit with them.
  // Returns the blocks promoted from each tier.
  struct Promoted {
    int32_t host_blocks = 0;
    int32_t disk_blocks = 0;
  };
  Promoted promote(std::span<const int32_t> tokens, const BlockExtraKeys& extra, PrefixHit& hit);

  const KvTierStats& stats() const { return stats_; }
  const HostTier& host() const { return *host_; }
  const DiskTier* disk() const { return disk_.get(); }

 private:
  KvTiers(const KvTierConfig& config, KvCacheManager& cache, BlockMover& mover,
          std::unique_ptr<HostTier> host, std::unique_ptr<DiskTier> disk);
  TierKey key(const BlockHash& hash) const { return TierKey{ns_, hash}; }
  // A host slot for key, writing the block it drops down to disk first.
  BlockId host_slot(const TierKey& key, std::span<const int32_t> tokens);

  uint64_t ns_;
  KvCacheManager& cache_;
  BlockMover& mover_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  BlockHasher hasher_;
  ThreadPool threads_;  // checksums of a batch of blocks (up to 8 threads)
  KvTierStats stats_;
};

}  // namespace strata::kv

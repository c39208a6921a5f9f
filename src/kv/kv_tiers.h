#pragma once
// KvTiers: the KV tiers under one cache's pool -- host memory, then local disk -- and how blocks
// move between them and the pool (docs/kv.md, "KV tiers"):
//
//   down     the pool evicts a cached block (PoolListener::on_evicted): before allocate()
//            returns, the block's bytes go to the host tier (BlockMover::to_host) under its
//            TierKey, unless the tier has it already (a block is written down once). With the
//            write-through policy a block goes down as soon as it is cached (on_cached, copied
//            at the next poll()), so its eviction costs nothing. A host block that has to make
//            room and is not on disk yet is written to disk first, on the I/O threads (TierIo),
//            its slot pinned meanwhile; the slot is taken once the write is done
//   prefetch prefetch(tokens, state) when a request is queued, and again while it waits whenever
//            blocks have left the pool or reached disk since: the chain's blocks that are on disk
//            and in neither the pool nor the host tier start loading disk -> host on the I/O
//            threads, and those in none of them nor on disk are asked of Redis (RemoteFetcher:
//            every queued request's blocks in one read, whether --no-kv-prefetch or not, so no
//            step waits on the network); the scheduler admits the request when its ticket has no
//            reads pending
//   up       promote_async(owner, tokens, hit) for the head of the queue (promote() waits): the
//            request's chain of full blocks past its pool prefix hit
//            (KvCacheManager::find_cached_prefix), block by block from the host tier, else read
//            from disk now (into a host slot), copied into freshly allocated pool blocks on the
//            mover's copy stream (BlockMover::start_from_host) while the running requests step
//            on and the host blocks' checksums run; once done, registered in the prefix cache as
//            if computed and appended to the hit, so the admission and every later step are the
//            pool prefix hit the engine already runs. A block a prefill instance's region on this
//            machine holds (a PeerSource claim) is copied from the region straight into its pool
//            block instead (BlockMover::start_from_region), and used once the prefill instance
//            confirms its slot was not reused meanwhile (and, on a CPU pool, its checksum holds)
//
//   groups   a cache of several groups (kv_group.h: INT4's newest blocks, a hybrid model's
//            windowed layers) has tiers per group that needs blocks before a hit's first
//            computed position, each with its share of the host and disk bytes (its pool's share
//            of the KV memory) and its own namespace (group_namespace); group 0's chain comes up
//            as above, then the copies each later group needs for the hit
//            (KvGroupSpec::first_needed_block) come up at once from its tiers and are linked to
//            group 0's blocks as computed copies are, and the hit is cut as find_cached_prefix
//            cuts it (KvCacheManager::hit_of). A group 0 with a sliding window comes up whole, as
//            the prefix cache keeps its chain
//
// Every block is confirmed by its token ids and its checksum before it is registered; a missing,
// truncated or corrupt block, or an I/O error, ends the promotion there (that block and its
// successors are recomputed) and is counted.
//
// Owns the tiers and the I/O threads; borrows the cache manager and the pools' movers (one per
// group, none shared with a copy thread of another user), which must outlive it, and listens to
// the pools for its lifetime. Not thread-safe: the scheduler thread
// calls everything; the I/O threads touch only pinned host slots and the (locked) disk index.
// Cost: one BlockMover copy per batch of blocks moved, one checksum per block moved (on up to 16
// threads; on the way up while the copy runs), one file per block written or read (on the I/O
// threads); with several groups or a window, two more walks of the prompt's cached chain (its
// hashes) per promote_async call.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/block_mover.h"
#include "kv/disk_tier.h"
#include "kv/host_tier.h"
#include "kv/kv_cache_manager.h"
#include "kv/peer_outbox.h"
#include "kv/peer_slots.h"
#include "kv/peer_source.h"
#include "kv/remote_fetcher.h"
#include "kv/remote_read_cost.h"
#include "kv/remote_tier.h"
#include "kv/tier_io.h"
#include "kv/tier_key.h"

namespace strata::kv {

enum class OffloadPolicy {
  kEvict,         // a block goes to the host tier when the pool evicts it
  kWriteThrough,  // ... as soon as it is cached
};

struct KvTierConfig {
  int64_t host_bytes = 0;  // --kv-offload-bytes: > 0 enables the tiers
  std::string disk_path;   // --kv-disk-path: empty = no disk tier
  int64_t disk_bytes = 0;  // --kv-disk-bytes
  uint64_t ns = 0;         // tier_namespace of the cache
  OffloadPolicy policy = OffloadPolicy::kEvict;  // --kv-offload-policy
  bool prefetch = true;                          // --kv-prefetch
  // --kv-remote: a Redis server under host and disk (group 0's blocks), shared with other
  // instances; blocks reach it as they reach the host tier, and come back through the prefetch
  // walk (read when the request is queued, whatever `prefetch` says).
  std::optional<RedisTarget> remote = {};
  RemoteTierOptions remote_options = {};
  // The remote values coded as suits the pool's dtype (its codec replaced); false: as
  // remote_options says.
  bool remote_codec = false;
  // --kv-remote-read always: every missing block is read and waited for; false (auto): only
  // reads that end before the blocks would be computed (RemoteReadCost).
  bool remote_read_always = false;
  // Disaggregation (docs/kv.md): --role prefill keeps every block written down (policy
  // write-through) in an outbox of this many bytes for decode instances to read (outbox());
  // --role decode reads the blocks no tier holds from the prefill instances peer_connects reach
  // (PeerSource: the one that computed them), every one of them (as remote_read_always), in
  // place of Redis.
  int64_t peer_outbox_bytes = 0;
  std::vector<PeerConnect> peer_connects = {};
  PeerSourceOptions peer_options = {};
  // The outbox's values coded as suits the pool's dtype (as remote_codec); false: stored.
  bool peer_codec = false;
  // --kv-peer-region-bytes on a prefill instance: every block written down is also copied by
  // the pool's mover into a region of this many bytes that decode instances on this machine map
  // (PeerSlots, peer_region.h), made by peer_region (shared memory on the CPU, CUDA IPC on the
  // GPU). 0: none. A decode instance takes slot records when peer_options.open_region is set.
  int64_t peer_region_bytes = 0;
  PeerRegionFactory peer_region = {};
};

struct KvTierStats {
  int64_t num_offloaded_blocks = 0;  // pool blocks written to the host tier
  int64_t num_disk_writes = 0;       // host blocks written down to disk
  int64_t num_host_hit_blocks = 0;   // blocks promoted from the host tier
  int64_t num_disk_hit_blocks = 0;   // blocks promoted from disk (prefetched or read at admission)
  int64_t num_prefetched_blocks = 0;  // blocks a prefetch brought from disk to the host tier
  int64_t num_dropped_blocks = 0;    // evicted blocks no host slot could take (all pinned)
  int64_t num_faults = 0;            // blocks that failed a check or an I/O (then recomputed)
  int64_t num_remote_fetched_blocks = 0;  // blocks a prefetch brought from Redis to host memory
  int64_t num_remote_hit_blocks = 0;      // of them, promoted (part of num_host_hit_blocks)
  int64_t num_remote_skipped_blocks = 0;  // not read: computing them was expected to be sooner
  int64_t num_remote_overdue = 0;  // requests admitted before their reads ended (RemoteReadCost)
  double disk_read_seconds = 0.0;    // the I/O threads' time reading blocks
  double io_wait_seconds = 0.0;      // the scheduler thread's time waiting for the I/O threads
  double down_seconds = 0.0;         // copying blocks down to the host tier, with checksums
  double up_seconds = 0.0;           // checking blocks and copying them up into the pool
};

// A waiting request's prefetch between calls (the scheduler keeps one per waiting sequence).
struct PrefetchState {
  std::vector<BlockHash> chain;  // the prompt's full blocks' chain hashes, computed once
  int64_t checked_at = -1;       // KvTiers' change count at the last walk
  std::shared_ptr<PrefetchTicket> ticket;  // the reads the last walk started (null: none)
  // Set by the scheduler before each walk: prompt tokens queued before this request's.
  int64_t tokens_ahead = 0;
  // With reads pending, when computing the blocks instead would have been done (RemoteReadCost):
  // past it the request is admitted without them (abandon_overdue).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // EngineRequest::remote_prefill_running: reads from the prefill instance wait for blocks not
  // there yet while it is true (RemoteFetcher::submit).
  std::shared_ptr<const std::atomic<bool>> remote_prefill_running;

  bool pending() const { return ticket && ticket->pending > 0; }
};

class KvTiers final : public PoolListener {
 public:
  // movers[g] moves group g's blocks. InvalidArgument for a config the cache cannot take (prefix
  // caching off, a host tier share smaller than one block of its group, a disk tier without a
  // host tier) or a disk directory that cannot be opened.
  static Result<std::unique_ptr<KvTiers>> create(const KvTierConfig& config, KvCacheManager& cache,
                                                 std::span<BlockMover* const> movers);
  // A cache of one group.
  static Result<std::unique_ptr<KvTiers>> create(const KvTierConfig& config, KvCacheManager& cache,
                                                 BlockMover& mover) {
    BlockMover* const movers[] = {&mover};
    return create(config, cache, movers);
  }
  ~KvTiers() override;
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  void on_cached(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens) override;
  void on_evicted(std::span<const EvictedBlock> blocks) override;

  // Applies the I/O threads' finished reads and writes, and copies the blocks cached since the
  // last call down (write-through). Once per step, before scheduling. With an event sink, the
  // disk and remote tiers' changes since the last call go to it (publish_events).
  void poll();
  // Borrowed; null = none. Hears of group 0's blocks entering and leaving the host tier (as
  // they do), the disk tier (every block there now first, then at each poll()) and the remote
  // tier (written or found there, at each poll()) -- the KV events of the tiers' media. The
  // later groups' tiers hold copies under group 0's hashes and are not reported.
  void set_event_sink(KvEventSink* sink);
  // Hands the disk and remote tiers' changes since the last call to the event sink (poll() does
  // too); the engine calls it at the end of each step, before the step's events are sent.
  void publish_events();
  // Blocks until a read from Redis under way, else one of group 0's I/O jobs, finishes, and
  // applies it (at once when none is outstanding); a read from Redis is waited for until `until`
  // at the latest (the head of the queue's PrefetchState::deadline).
  void wait_io(std::chrono::steady_clock::time_point until =
                   std::chrono::steady_clock::time_point::max());
  // Waits for every outstanding disk read and write, and applies them.
  void drain_io();

  // Starts loading, disk -> host tier on the I/O threads, the blocks of tokens' chain (as
  // promote walks it) that follow the pool's cached prefix and lie on disk but not in the host
  // tier, into free slots or slots whose blocks are on disk already, while prefetched blocks not
  // yet served and reads under way hold less than a quarter of the host tier; those past them
  // that are in none of the tiers are read from Redis (with a remote tier), and those another
  // request's read brings are waited for. state.ticket counts them (null when none were started).
  // Does nothing when state's reads are pending, or no block has left the pool or reached a
  // tier since state's last walk; reads nothing from disk when prefetch is off.
  void prefetch(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                PrefetchState& state);
  // A step's forward pass computed tokens (prefill among them) in seconds: the cost of computing
  // a prefix that the remote tier's reads are weighed against (RemoteReadCost).
  void observe_step(int64_t tokens, double seconds) { read_cost_.observe_step(tokens, seconds); }
  // Whether state's pending reads are past its deadline; if so they are left to finish for
  // whoever needs the blocks next, and the request goes on without them (counted).
  bool abandon_overdue(PrefetchState& state);

  // Brings the chain of tokens' full blocks (leaving the last token, as find_cached_prefix does)
  // that follows hit -- find_cached_prefix's for these tokens and keys, in this same scheduling
  // decision -- up from the tiers as far as it continues unbroken, and extends hit with them
  // (several groups, or a window: hit becomes what find_cached_prefix finds then). Returns the
  // blocks promoted from each tier (group 0's, and the hit's blocks that only later groups' copies
  // from the tiers made usable). Waits for the copies.
  struct Promoted {
    int32_t host_blocks = 0;
    int32_t disk_blocks = 0;
  };
  Promoted promote(std::span<const int32_t> tokens, const BlockExtraKeys& extra, PrefixHit& hit);

  // The same without waiting: the promotion of owner's chain (a waiting request's) starts --
  // fresh pool blocks allocated and held with hit's, its copies left running on the mover's copy
  // stream, its host blocks' checksums on the check threads -- and comes back pending while they
  // run; called again for owner once promotion_ready() (with hit find_cached_prefix's again: the
  // held prefix keeps it what it was), it registers the blocks, extends hit, and goes on with the
  // chain's next stage, if the host tier could not pin it all at once (every stage but the last
  // is waited for in the call). One promotion at a time: another owner's is cancelled first.
  // With a mover that copies at once, only the checks are waited for.
  struct Progress {
    bool pending = false;  // copies or checks still running: hit is not extended yet
    Promoted promoted;     // blocks registered and appended to hit by this call
  };
  Progress promote_async(const void* owner, std::span<const int32_t> tokens,
                         const BlockExtraKeys& extra, PrefixHit& hit);
  bool promotion_under_way() const { return promotion_.has_value(); }
  // Blocks cached since the last poll() that the write-through policy copies down at the next.
  bool has_write_through_pending() const { return !cached_.empty(); }
  // Whether owner's promotion is under way and not ready yet (nothing to look up for it).
  bool promotion_pending(const void* owner) {
    return promotion_ && promotion_->owner == owner && !promotion_ready();
  }
  // Whether a promotion is under way and its copies and checks have finished.
  bool promotion_ready();
  // Blocks until the promotion under way, if any, is ready.
  void wait_promotion();
  // Ends owner's promotion, if one is under way: it waits for the copies and gives the blocks back
  // uncached (the tiers keep them). For a request that leaves the queue.
  void cancel_promotion(const void* owner);

  const KvTierStats& stats() const { return stats_; }
  // Group g's tiers (null: the group has none, since no hit needs its blocks).
  const HostTier* host(int32_t g) const { return tier(g) ? tier(g)->host.get() : nullptr; }
  const DiskTier* disk(int32_t g) const { return tier(g) ? tier(g)->disk.get() : nullptr; }
  const HostTier& host() const { return *tiers_[0]->host; }
  const DiskTier* disk() const { return disk(0); }
  const RemoteTier* remote() const { return tiers_[0]->remote.get(); }
  // --role prefill's outbox, whose lookup a PeerServer serves; --role decode's source.
  PeerOutbox* outbox() const { return tiers_[0]->outbox.get(); }
  // --role prefill's peer region's slots (null without --kv-peer-region-bytes).
  PeerSlots* peer_slots() const { return tiers_[0]->slots.get(); }
  // --role decode's reads from the prefill instances, both sources' (none without): the one
  // that reads blocks already there, and the one that waits for blocks still being computed.
  std::optional<PeerSourceStats> peer_stats() const;

 private:
  class GroupListener;
  // One group's tiers: its host tier, its disk tier and their I/O threads, under its pool.
  struct Tier {
    int32_t group = 0;
    uint64_t ns = 0;  // group_namespace of the cache's
    BlockMover* mover = nullptr;
    std::unique_ptr<HostTier> host;
    std::unique_ptr<DiskTier> disk;
    std::unique_ptr<TierIo> io;  // with a disk tier
    std::unique_ptr<RemoteTier> remote;  // group 0, with --kv-remote
    std::unique_ptr<PeerOutbox> outbox;  // group 0, --role prefill
    std::unique_ptr<PeerSlots> slots;    // group 0, --role prefill with a peer region
    std::unique_ptr<PeerSource> peer;    // group 0, --role decode
    // --role decode: the reads that wait for a prefill still running, over connections of
    // their own (RemoteFetcher's producing source).
    std::unique_ptr<PeerSource> peer_producing;
    // --role decode with --kv-peer-region: the confirmations of blocks copied straight out of a
    // region into the pool (a promotion's), over connections of their own.
    std::unique_ptr<PeerSource> peer_confirm;
    // Where the blocks written down are lent besides the host tier (remote, outbox).
    std::vector<BlockSink*> sinks() const;
    std::unique_ptr<GroupListener> listener;  // groups after the first (group 0's: KvTiers)

    TierKey key(const BlockHash& hash) const { return TierKey{ns, hash}; }
  };

  KvTiers(const KvTierConfig& config, KvCacheManager& cache,
          std::vector<std::unique_ptr<Tier>> tiers);
  const Tier* tier(int32_t g) const {
    return static_cast<size_t>(g) < tiers_.size() ? tiers_[static_cast<size_t>(g)].get() : nullptr;
  }
  // Host blocks being written to disk at once to free their slots.
  static constexpr int32_t kMaxWritesAhead = 2 * TierIo::kThreads;
  // Prefetched blocks not yet served, and prefetch reads under way, hold at most 1/this of the
  // host tier.
  static constexpr int32_t kPrefetchShare = 4;

  // A pinned host slot of t for key: free, or the least recent one, whose block goes to disk first
  // when it is not there yet (the slot is taken once that write is done). When every slot is
  // pinned: waits for the I/O threads if wait and any job is outstanding, else nullopt.
  // With write_down false, a victim not on disk yet is not written: nullopt instead.
  std::optional<BlockId> host_slot(Tier& t, const TierKey& key, std::span<const int32_t> tokens,
                                   bool wait, bool write_down = true);
  // Applies t's finished I/O jobs; with block, first waits for one (false: none outstanding).
  bool apply_io(Tier& t, bool block);
  // Unpins the host slots the sinks (the remote tier's writer, the outbox) are done with
  // (put_borrowed); with block, first waits for one. False when none was released.
  bool apply_written(Tier& t, bool block);
  void submit_read(Tier& t, BlockId slot, const TierKey& key, std::span<const int32_t> tokens,
                   bool keep_pinned, std::shared_ptr<PrefetchTicket> ticket);
  // The pool of t's group cached or evicted blocks (PoolListener, per group).
  void cached(Tier& t, BlockId block, const BlockHash& hash, std::span<const int32_t> tokens);
  void evicted(Tier& t, std::span<const EvictedBlock> blocks);
  // Write-through: the blocks cached since the last call, still cached as they were, down.
  void write_through();
  void write_through(Tier& t);  // t's group's
  // A committed host slot of t holding key (pinned), found in the host tier or read from disk
  // now; nullopt when neither has it (or every slot is pinned). from_disk: it was read now or
  // by a prefetch.
  std::optional<BlockId> stage_now(Tier& t, const TierKey& key, std::span<const int32_t> tokens,
                                   bool& from_disk);

  // Pool blocks on their way down into pinned host slots.
  struct DownBatch {
    std::vector<BlockCopy> copies;  // pool block -> host slot
    std::vector<BlockId> slots;
  };
  // Copies the batch down, checksums and commits its slots, unpins them, and empties it.
  void copy_down(Tier& t, DownBatch& batch);
  // The batch's blocks, copied down and committed, into t's peer region too (with their host
  // checksums), as many as it has slots.
  void copy_to_region(Tier& t, const DownBatch& batch);
  // A block of a promotion's stage, in a pinned host slot -- or, with a claim, in a prefill
  // instance's region, copied from there straight into the pool and confirmed (slot unused).
  struct Staged {
    BlockId slot;
    TierKey key;
    bool from_disk = false;  // read from disk, now or by a prefetch: checked as it was read, and
                             // counted as a disk hit
    std::shared_ptr<const PeerSlotClaim> claim = nullptr;
  };
  // A promotion under way (promote_async).
  struct Promotion {
    const void* owner = nullptr;
    std::vector<BlockHash> hashes;  // the chain through the last staged block
    std::vector<BlockId> resident;  // the pool prefix it goes on from, held
    std::vector<BlockId> blocks;    // fresh pool blocks, held: staged[i] goes to blocks[i]
    std::vector<Staged> staged;     // pinned host slots
    bool last = false;              // nothing of the chain is left for another stage
    uint64_t ticket = BlockMover::kDoneTicket;  // the copies
    std::future<size_t> checked;    // how many of staged's host blocks, from the first, are good
    // Of staged's claims, in order, which were copied well and confirmed (their slots not
    // written since the records were served): started once the copies are done (start_confirm).
    std::future<std::vector<uint8_t>> confirmed;
    bool confirm_started = false;
  };
  // Once p's copies are done: the checksums of its claims' pool blocks (a CPU pool) and their
  // confirmation by the prefill instance start on a thread of their own (p.confirmed); nothing
  // when p has no claims or they have started.
  void start_confirm(Promotion& p);
  // Queues a read from Redis, into host slots taken now (free or least recent, not to be written
  // down), of the blocks of state.chain[first, ...) that neither the host tier holds nor another
  // request's read brings (those the ticket joins), at most limit of them, unless computing them
  // is expected to be sooner (counted as skipped).
  void fetch_remote(Tier& t, std::span<const int32_t> tokens, const PrefetchState& state,
                    int32_t first, int32_t limit, const std::shared_ptr<PrefetchTicket>& ticket);
  // Applies the remote reads that are done (with block, waits for one): each job's blocks, from
  // its first, as far as they were found and good, are committed in their slots; the rest give
  // their slots back. False when none is under way (with block: none was, or `until` came
  // with none done and reads still under way: true).
  bool apply_remote(bool block, std::chrono::steady_clock::time_point until =
                                    std::chrono::steady_clock::time_point::max());
  // The pool prefix a promotion goes on from: hit itself for one full-attention group, else
  // group 0's whole cached chain (cached_chain).
  PrefixHit resident_chain(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                           const PrefixHit& hit) const;
  // Groups after the first: the copies a hit of chain's blocks needs that their pools lack come
  // up from their tiers (at once: a few blocks, a window's worth at most), cut back as
  // find_cached_prefix cuts a hit past a copy no tier has; then hit becomes the cut chain
  // (hit_of). Counts in promoted the hit's blocks this made usable beyond group 0's promotion.
  void promote_copies(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                      PrefixHit& hit, Promoted& promoted);
  // Stages the chain's next blocks past hit (as many as the host tier can pin; disk reads are
  // waited for) and starts their copy up and checks as promotion_; false when none could be.
  bool start_promotion(const void* owner, std::span<const int32_t> tokens,
                       const BlockExtraKeys& extra, const PrefixHit& hit);
  // Ends promotion_ (waiting for its copies and checks): its good prefix is registered and
  // appended to *hit when hit still holds just the prefix it went on from, else freed uncached
  // (hit null: the owner left); promoted counts what was appended. Returns whether the chain
  // may go on past *hit in the tiers.
  bool finish_promotion(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                        PrefixHit* hit, Promoted& promoted);
  // Blocks per copy in copy_down: the checksums of one chunk run on the tiers' threads while the
  // next one copies.
  size_t chunk_blocks(const Tier& t) const;
  static constexpr int64_t kPipelineChunkBytes = int64_t{32} << 20;

  struct Cached {
    int32_t group = 0;
    BlockId block;
    uint32_t cache_gen = 0;
    BlockHash hash;
    std::vector<int32_t> tokens;
  };

  OffloadPolicy policy_;
  bool prefetch_;
  bool remote_read_always_;
  KvCacheManager& cache_;
  // By group, null where a group has none; group 0's always. Group 0's are what the promotion
  // stages and the prefetch walk; later groups' serve promote_copies.
  std::vector<std::unique_ptr<Tier>> tiers_;
  bool one_full_group_;  // the hit is group 0's whole chain: promotions extend it in place
  BlockHasher hasher_;
  ThreadPool threads_;  // checksums of a batch of blocks copied down (up to 16 threads)
  ThreadPool check_threads_;  // checksums of a promotion's host blocks (as many)
  std::optional<Promotion> promotion_;
  // Group 0's reads of Redis (a remote tier) or of the prefill instance (a peer).
  std::unique_ptr<RemoteFetcher> fetcher_;
  std::unordered_set<TierKey, TierKeyHasher> from_remote_;  // host blocks they brought, unserved
  // Host slots a read of the fetcher filled while requests that asked for them still wait (their
  // tickets held by their PrefetchState): pinned until every such ticket is dropped (the request
  // admitted, gone, or on without them), so blocks going down do not push them out before they
  // are used. Within the prefetch share (from_remote_ counts them). Released as reads are applied
  // (poll, wait_io, drain_io).
  struct HeldRead {
    BlockId slot;
    std::vector<std::weak_ptr<PrefetchTicket>> waiting;
  };
  std::vector<HeldRead> held_reads_;
  void release_held_reads();
  // Blocks a prefill instance's region on this machine holds, as its slot records named them
  // (PeerSource claims), each with the order it came in: not copied until a promotion copies
  // them into the pool. At most half the host tier's blocks (the peer reads' prefetch share);
  // past that the oldest go (a scan, only then).
  struct Claim {
    std::shared_ptr<const PeerSlotClaim> claim;
    int64_t seq = 0;
  };
  std::unordered_map<TierKey, Claim, TierKeyHasher> claims_;
  int64_t claims_seen_ = 0;
  RemoteReadCost read_cost_;
  std::vector<Cached> cached_;  // write-through: cached since the last poll()
  int64_t changes_ = 0;  // bumped when blocks leave the pool or reach disk (PrefetchState)
  int32_t prefetch_reads_ = 0;  // prefetch reads submitted, not applied yet
  KvEventSink* event_sink_ = nullptr;
  KvTierStats stats_;
};

}  // namespace strata::kv

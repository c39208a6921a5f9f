#include "kv/kv_tiers.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "kv/peer_frames.h"

namespace strata::kv {

// A later group's pool's listener: what it caches and evicts goes to that group's tiers.
class KvTiers::GroupListener final : public PoolListener {
 public:
  GroupListener(KvTiers& tiers, Tier& tier) : tiers_(tiers), tier_(tier) {}
  void on_cached(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens) override {
    tiers_.cached(tier_, block, hash, tokens);
  }
  void on_evicted(std::span<const EvictedBlock> blocks) override { tiers_.evicted(tier_, blocks); }

 private:
  KvTiers& tiers_;
  Tier& tier_;
};

namespace {

// The blocks of group g a hit reads before its first computed position: a window's last blocks,
// an INT4 cache's newest R - 1 (for group 0, those of a long hit).
int32_t blocks_read_before_hit_end(const KvCacheManager& cache, int32_t g) {
  constexpr int32_t kBlocks = 1 << 12;
  return kBlocks - cache.group_spec(g).first_needed_block(kBlocks * cache.block_size(),
                                                         cache.block_size());
}

// Whether group g has tiers: group 0 always (its chain is the hit), a later group when a hit
// reads some of its blocks.
bool group_is_tiered(const KvCacheManager& cache, int32_t g) {
  return g == 0 || blocks_read_before_hit_end(cache, g) > 0;
}

// How the remote tier's values hold a block of this layout under --kv-remote-compress
// (docs/benchmarks.md, "The KV codec", measured on strata-tiny's KV): BF16 split per layer's K
// and V (1.32x, decoding at 10 GB/s a core), F16 and FP8 zstd (1.08x and 1.19x), the rest stored
// (zstd gains INT8 and INT4 blocks 2-6 %, not worth a core).
KvCodecPlan remote_codec_plan(const KvLayout& layout) {
  const KvSpec& spec = layout.spec();
  if (spec.is_mixed()) return {};
  if (split_format_of(spec.dtype) == SplitFormat::kBf16) {
    return KvCodecPlan{.scheme = KvCodecScheme::kSplit,
                       .split = SplitFormat::kBf16,
                       .segment_bytes = static_cast<size_t>(layout.layer_bytes() / 2)};
  }
  if (spec.dtype == DType::kF16 || spec.dtype == DType::kF8E4M3 || spec.dtype == DType::kF8E5M2) {
    return KvCodecPlan{.scheme = KvCodecScheme::kZstd};
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<KvTiers>> KvTiers::create(const KvTierConfig& config, KvCacheManager& cache,
                                                 std::span<BlockMover* const> movers) {
  if (!cache.prefix_caching()) {
    return Status::InvalidArgument("--kv-offload-bytes needs prefix caching (the tiers' key)");
  }
  if (static_cast<int32_t>(movers.size()) != cache.num_groups()) {
    return Status::InvalidArgument("KV tiers need one block mover per KV cache group");
  }
  // Each tiered group's share of the bytes: its pool's share of the tiered groups' pools.
  const int32_t bs = cache.block_size();
  double pools_bytes = 0.0;
  for (int32_t g = 0; g < cache.num_groups(); ++g) {
    if (!group_is_tiered(cache, g)) continue;
    pools_bytes += static_cast<double>(cache.pool(g).num_blocks()) *
                   static_cast<double>(cache.group_spec(g).block_bytes(bs));
  }
  std::vector<std::unique_ptr<Tier>> tiers(static_cast<size_t>(cache.num_groups()));
  for (int32_t g = 0; g < cache.num_groups(); ++g) {
    if (!group_is_tiered(cache, g)) continue;
    const KvLayout layout(cache.group_spec(g).kv, bs);
    const int64_t block_bytes = layout.block_bytes();
    const double share = static_cast<double>(cache.pool(g).num_blocks()) *
                         static_cast<double>(block_bytes) / pools_bytes;
    const auto host_bytes = static_cast<int64_t>(static_cast<double>(config.host_bytes) * share);
    const auto disk_bytes = static_cast<int64_t>(static_cast<double>(config.disk_bytes) * share);
    if (host_bytes < block_bytes) {
      if (!config.disk_path.empty() && config.host_bytes <= 0) {
        return Status::InvalidArgument(
            "--kv-disk-path needs --kv-offload-bytes: the disk tier "
            "reads and writes through the host tier");
      }
      if (cache.num_groups() == 1) {
        if (!config.disk_path.empty()) {
          return Status::InvalidArgument(
              "--kv-disk-path needs --kv-offload-bytes: the disk tier "
              "reads and writes through the host tier");
        }
        return Status::InvalidArgument("--kv-offload-bytes " + std::to_string(config.host_bytes) +
                                       " holds no block (one takes " +
                                       std::to_string(block_bytes) + " bytes)");
      }
      return Status::InvalidArgument(
          "--kv-offload-bytes " + std::to_string(config.host_bytes) + " gives KV cache group " +
          std::to_string(g) + " (" + kv_group_kind_name(cache.group_spec(g).kind) + ") " +
          std::to_string(host_bytes) + " bytes, less than one of its blocks (" +
          std::to_string(block_bytes) +
          " bytes): the host tier is split between the groups as their pools are");
    }
    // A later group's copies for one hit come up at once: its host tier must hold them.
    if (g > 0 && host_bytes < blocks_read_before_hit_end(cache, g) * block_bytes) {
      return Status::InvalidArgument(
          "--kv-offload-bytes " + std::to_string(config.host_bytes) + " gives KV cache group " +
          std::to_string(g) + " (" + kv_group_kind_name(cache.group_spec(g).kind) + ") " +
          std::to_string(host_bytes) + " bytes, fewer than the " +
          std::to_string(blocks_read_before_hit_end(cache, g)) +
          " blocks a prefix hit reads from it: the host tier is split between the groups as "
          "their pools are");
    }
    auto t = std::make_unique<Tier>();
    t->group = g;
    t->ns = group_namespace(config.ns, g);
    t->mover = movers[static_cast<size_t>(g)];
    const auto capacity = static_cast<int32_t>(
        std::min<int64_t>(host_bytes / block_bytes, std::numeric_limits<int32_t>::max() - 1));
    t->host = std::make_unique<HostTier>(layout, capacity);
    if (!config.disk_path.empty()) {
      Result<std::unique_ptr<DiskTier>> opened =
          DiskTier::open(config.disk_path, t->ns, bs, block_bytes, disk_bytes);
      if (!opened.ok()) return opened.status();
      t->disk = std::move(opened).value();
    }
    if (config.remote && g == 0) {
      RemoteTierOptions remote_options = config.remote_options;
      if (config.remote_codec) remote_options.codec = remote_codec_plan(layout);
      t->remote = std::make_unique<RemoteTier>(*config.remote, t->ns, bs, block_bytes,
                                               std::move(remote_options));
    } else if (config.remote) {
      return Status::InvalidArgument(
          "--kv-remote holds group 0's blocks only: a cache whose later groups a hit reads (a "
          "hybrid model's windows, --kv-int4-residual above one block) cannot use it yet");
    }
    const bool peers = config.peer_outbox_bytes > 0 || !config.peer_connects.empty();
    if (peers && g > 0) {
      return Status::InvalidArgument(
          "--role prefill and decode move group 0's blocks only: a cache whose later groups a "
          "hit reads (a hybrid model's windows, --kv-int4-residual above one block) cannot be "
          "disaggregated yet");
    }
    if (!config.peer_connects.empty() && config.remote) {
      return Status::InvalidArgument(
          "--role decode reads the blocks it lacks from the prefill instance: --kv-remote "
          "beside it is not supported");
    }
    if (peers) {
      const BlockValueFormat format(t->ns, bs, block_bytes,
                                    config.peer_codec ? remote_codec_plan(layout) : KvCodecPlan{});
      if (config.peer_outbox_bytes > 0) {
        t->outbox = std::make_unique<PeerOutbox>(format, config.peer_outbox_bytes);
      }
      if (config.peer_outbox_bytes > 0 && config.peer_region_bytes > 0) {
        if (config.peer_region_bytes < kPeerRegionHeaderBytes + block_bytes) {
          return Status::InvalidArgument(
              "--kv-peer-region-bytes " + std::to_string(config.peer_region_bytes) +
              " holds no block (one takes " + std::to_string(block_bytes) + " bytes)");
        }
        STRATA_CHECK(static_cast<bool>(config.peer_region), "a peer region needs its factory");
        Result<std::unique_ptr<PeerRegion>> region = config.peer_region(config.peer_region_bytes);
        if (!region.ok()) return region.status();
        t->slots = std::make_unique<PeerSlots>(std::move(region).value(), t->ns, block_bytes);
      }
      if (!config.peer_connects.empty()) {
        // Blocks out of a region go straight into the pool (claims), never through a host slot.
        PeerSourceOptions options = config.peer_options;
        options.claim_slots = static_cast<bool>(options.open_region);
        t->peer = std::make_unique<PeerSource>(format, config.peer_connects, options);
        t->peer_producing = std::make_unique<PeerSource>(format, config.peer_connects, options);
        if (options.claim_slots) {
          options.decode_threads = 1;  // (confirm() decodes nothing)
          t->peer_confirm = std::make_unique<PeerSource>(format, config.peer_connects, options);
        }
      }
    }
    tiers[static_cast<size_t>(g)] = std::move(t);
  }
  return std::unique_ptr<KvTiers>(new KvTiers(config, cache, std::move(tiers)));
}

KvTiers::KvTiers(const KvTierConfig& config, KvCacheManager& cache,
                 std::vector<std::unique_ptr<Tier>> tiers)
    : policy_(config.policy),
      prefetch_(config.prefetch),
      remote_read_always_(config.remote_read_always || !config.peer_connects.empty()),
      cache_(cache),
      tiers_(std::move(tiers)),
      one_full_group_(cache.num_groups() == 1 &&
                      cache.group_spec(0).kind == KvGroupKind::kFullAttention),
      hasher_(cache.hash_bits()),
      threads_(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u))),
      check_threads_(threads_.num_threads()) {
  for (const std::unique_ptr<Tier>& t : tiers_) {
    if (!t) continue;
    if (t->disk) t->io = std::make_unique<TierIo>(*t->disk);
    if (t->remote) fetcher_ = std::make_unique<RemoteFetcher>(*t->remote);
    if (t->peer) fetcher_ = std::make_unique<RemoteFetcher>(*t->peer, t->peer_producing.get());
    t->mover->attach(t->host->buffer());
    if (t->group == 0) {
      cache_.pool(0).set_listener(this);
    } else {
      t->listener = std::make_unique<GroupListener>(*this, *t);
      cache_.pool(t->group).set_listener(t->listener.get());
    }
  }
}

std::optional<PeerSourceStats> KvTiers::peer_stats() const {
  const Tier& t = *tiers_[0];
  if (!t.peer) return std::nullopt;
  PeerSourceStats s = t.peer->stats();
  s += t.peer_producing->stats();
  if (t.peer_confirm) s += t.peer_confirm->stats();
  return s;
}

KvTiers::~KvTiers() {
  if (promotion_) cancel_promotion(promotion_->owner);
  fetcher_.reset();  // its read under way ends first
  for (const std::unique_ptr<Tier>& t : tiers_) {
    if (!t) continue;
    cache_.pool(t->group).set_listener(nullptr);
    t->io.reset();  // its jobs finish before the slots they touch go
    t->mover->detach(t->host->buffer());
  }
}

void KvTiers::wait_io(std::chrono::steady_clock::time_point until) {
  if (!apply_remote(/*block=*/true, until)) apply_io(*tiers_[0], /*block=*/true);
}

void KvTiers::drain_io() {
  while (apply_remote(/*block=*/true)) {
  }
  while (apply_written(*tiers_[0], /*block=*/true)) {
  }
  for (const std::unique_ptr<Tier>& t : tiers_) {
    while (t && apply_io(*t, /*block=*/true)) {
    }
  }
}

std::vector<BlockSink*> KvTiers::Tier::sinks() const {
  std::vector<BlockSink*> out;
  if (remote) out.push_back(remote.get());
  if (outbox) out.push_back(outbox.get());
  return out;
}

bool KvTiers::apply_written(Tier& t, bool block) {
  bool any = false;
  for (BlockSink* const sink : t.sinks()) {
    const std::vector<uint64_t> released = sink->take_released(block && !any);
    for (const uint64_t tag : released) {
      t.host->unpin(BlockId{static_cast<int32_t>(tag)});
    }
    any = any || !released.empty();
  }
  return any;
}

bool KvTiers::apply_io(Tier& t, bool block) {
  if (!t.io) return false;
  if (block) {
    const auto start = std::chrono::steady_clock::now();
    const bool any = t.io->wait_any();
    stats_.io_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!any) return false;
  }
  for (TierIo::Done& d : t.io->take_done()) {
    const TierIo::Job& job = d.job;
    if (job.write) {
      // The block is on disk now (or the write failed and it is only in memory): the slot may go.
      (d.status.ok() ? stats_.num_disk_writes : stats_.num_faults) += 1;
      ++changes_;
      t.host->unpin(job.slot, /*least_recent=*/true);
      continue;
    }
    stats_.disk_read_seconds += d.seconds;
    if (job.ticket) {
      --job.ticket->pending;
      --prefetch_reads_;
    }
    if (!d.status.ok()) {
      if (d.status.code() != StatusCode::kNotFound) ++stats_.num_faults;
      t.host->erase(job.slot);
      continue;
    }
    t.host->commit(job.slot, job.checksum, /*prefetched=*/job.ticket != nullptr);  // checked
    if (job.ticket) ++stats_.num_prefetched_blocks;
    if (!job.keep_pinned) t.host->unpin(job.slot);
  }
  return true;
}

std::optional<BlockId> KvTiers::host_slot(Tier& t, const TierKey& key,
                                          std::span<const int32_t> tokens,
                                          bool wait, bool write_down) {
  for (;;) {
    if (t.host->num_free() == 0) {
      const std::optional<BlockId> victim = t.host->least_recent();
      // Unpinned slots are committed; one whose block is not on disk yet goes there first, a
      // few writes at a time (the next least recent ones start while the first are written).
      const bool needs_write = victim && t.disk && !t.disk->contains(t.host->key(*victim).hash);
      if (needs_write && !write_down) return std::nullopt;
      if (!victim || (needs_write && t.io->writes_outstanding() >= kMaxWritesAhead)) {
        if (apply_written(t, /*block=*/false)) continue;
        if (wait && (apply_io(t, /*block=*/true) || apply_written(t, /*block=*/true))) continue;
        return std::nullopt;
      }
      if (needs_write) {
        t.host->pin(*victim);
        t.io->submit(TierIo::Job{.write = true,
                                .slot = *victim,
                                .hash = t.host->key(*victim).hash,
                                .tokens = {t.host->tokens(*victim).begin(),
                                           t.host->tokens(*victim).end()},
                                .bytes = t.host->bytes(*victim),
                                .checksum = t.host->checksum(*victim),
                                .keep_pinned = false,
                                .ticket = nullptr});
        continue;
      }
    }
    if (t.host->num_free() == 0 && t.group == 0) {
      if (const std::optional<BlockId> victim = t.host->least_recent()) {  // insert takes it
        const auto age = std::chrono::steady_clock::now() - t.host->inserted_at(*victim);
        read_cost_.observe_residence(std::chrono::duration<double>(age).count());
      }
    }
    const std::optional<BlockId> slot = t.host->insert(key, tokens);
    if (slot) t.host->pin(*slot);
    return slot;
  }
}

void KvTiers::submit_read(Tier& t, BlockId slot, const TierKey& key,
                          std::span<const int32_t> tokens,
                          bool keep_pinned, std::shared_ptr<PrefetchTicket> ticket) {
  if (ticket) {
    ++ticket->pending;
    ++ticket->blocks;
    ++prefetch_reads_;
  }
  t.io->submit(TierIo::Job{.write = false,
                          .slot = slot,
                          .hash = key.hash,
                          .tokens = {tokens.begin(), tokens.end()},
                          .bytes = t.host->bytes(slot),
                          .checksum = 0,
                          .keep_pinned = keep_pinned,
                          .ticket = std::move(ticket)});
}

void KvTiers::on_cached(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens) {
  cached(*tiers_[0], block, hash, tokens);
}

void KvTiers::on_evicted(std::span<const EvictedBlock> blocks) { evicted(*tiers_[0], blocks); }

void KvTiers::cached(Tier& t, BlockId block, const BlockHash& hash,
                     std::span<const int32_t> tokens) {
  if (policy_ != OffloadPolicy::kWriteThrough || t.host->contains(t.key(hash))) return;
  cached_.push_back(Cached{t.group, block, cache_.pool(t.group).cache_gen(block), hash,
                           {tokens.begin(), tokens.end()}});
}

size_t KvTiers::chunk_blocks(const Tier& t) const {
  return static_cast<size_t>(std::max<int64_t>(1, kPipelineChunkBytes / t.host->block_bytes()));
}

void KvTiers::copy_down(Tier& t, DownBatch& batch) {
  if (batch.copies.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  // Chunk by chunk: the checksums of one on the tiers' threads while the next one copies.
  const size_t n = batch.copies.size();
  const size_t chunk = chunk_blocks(t);
  const std::span<const BlockCopy> copies(batch.copies);
  const std::span<const BlockId> slots(batch.slots);
  std::future<void> sums;
  for (size_t begin = 0; begin < n; begin += chunk) {
    const size_t len = std::min(chunk, n - begin);
    t.mover->to_host(copies.subspan(begin, len), t.host->buffer());
    if (sums.valid()) sums.get();
    const std::span<const BlockId> done = slots.subspan(begin, len);
    if (begin + len == n) {
      t.host->commit(done, &threads_);
    } else {
      sums = std::async(std::launch::async, [this, &t, done] { t.host->commit(done, &threads_); });
    }
  }
  copy_to_region(t, batch);
  const std::vector<BlockSink*> sinks = t.sinks();
  for (const BlockId s : batch.slots) {
    // Shared with other instances as soon as it is here (queued; dropped when a sink lags): each
    // sink codes its value from the slot, which it holds pinned until it is done
    // (apply_written).
    for (BlockSink* const sink : sinks) {
      t.host->pin(s);
      if (!sink->put_borrowed(t.host->key(s).hash, t.host->tokens(s), t.host->bytes(s),
                              t.host->checksum(s), static_cast<uint64_t>(s.value))) {
        t.host->unpin(s);
      }
    }
    t.host->unpin(s);
  }
  stats_.num_offloaded_blocks += static_cast<int64_t>(n);
  stats_.down_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  batch.copies.clear();
  batch.slots.clear();
}

void KvTiers::copy_to_region(Tier& t, const DownBatch& batch) {
  if (!t.slots) return;
  const size_t n = std::min(batch.copies.size(), static_cast<size_t>(t.slots->num_slots()));
  std::vector<BlockHash> hashes;
  hashes.reserve(n);
  for (size_t i = 0; i < n; ++i) hashes.push_back(t.host->key(batch.slots[i]).hash);
  const std::vector<int32_t> taken = t.slots->reserve(hashes);
  std::vector<BlockCopy> copies;
  for (size_t i = 0; i < n; ++i) {
    if (taken[i] >= 0) copies.push_back(BlockCopy{batch.copies[i].src, BlockId{taken[i]}});
  }
  // The copies complete before any record of them is served (peer_slots.h).
  t.mover->to_region(copies, t.slots->region().slots());
  for (size_t i = 0; i < n; ++i) {
    if (taken[i] >= 0) t.slots->publish(taken[i], hashes[i], t.host->checksum(batch.slots[i]));
  }
}

void KvTiers::evicted(Tier& t, std::span<const EvictedBlock> blocks) {
  ++changes_;
  // One copy for the whole batch; its slots stay pinned until it is copied, so when every slot
  // is taken the batch so far goes first.
  DownBatch batch;
  for (const EvictedBlock& b : blocks) {
    const TierKey k = t.key(b.hash);
    if (t.host->contains(k)) continue;  // written down before (or being read back): never twice
    std::optional<BlockId> slot = host_slot(t, k, b.tokens, /*wait=*/true);
    if (!slot && !batch.copies.empty()) {
      copy_down(t, batch);
      slot = host_slot(t, k, b.tokens, /*wait=*/true);
    }
    if (!slot) {
      ++stats_.num_dropped_blocks;
      continue;
    }
    batch.copies.push_back(BlockCopy{b.block, *slot});
    batch.slots.push_back(*slot);
  }
  copy_down(t, batch);
}

void KvTiers::write_through() {
  for (const std::unique_ptr<Tier>& tier : tiers_) {
    if (tier) write_through(*tier);
  }
  cached_.clear();
}

void KvTiers::write_through(Tier& t) {
  const BlockPool& pool = cache_.pool(t.group);
  DownBatch batch;
  for (const Cached& c : cached_) {
    if (c.group != t.group) continue;
    const TierKey k = t.key(c.hash);
    // Evicted since (and written down then), or cached again with other content: nothing to do.
    if (t.host->contains(k) || !pool.is_cached(c.block) || pool.cache_gen(c.block) != c.cache_gen) {
      continue;
    }
    std::optional<BlockId> slot = host_slot(t, k, c.tokens, /*wait=*/false);
    if (!slot && !batch.copies.empty()) {
      copy_down(t, batch);
      slot = host_slot(t, k, c.tokens, /*wait=*/false);
    }
    if (!slot) break;  // the rest go down when evicted
    batch.copies.push_back(BlockCopy{c.block, *slot});
    batch.slots.push_back(*slot);
  }
  copy_down(t, batch);
}

void KvTiers::poll() {
  apply_remote(/*block=*/false);
  apply_written(*tiers_[0], /*block=*/false);
  for (const std::unique_ptr<Tier>& t : tiers_) {
    if (t) apply_io(*t, /*block=*/false);
  }
  if (!cached_.empty()) write_through();
  publish_events();
}

void KvTiers::release_held_reads() {
  HostTier& host = *tiers_[0]->host;
  std::erase_if(held_reads_, [&](const HeldRead& h) {
    const bool waited_for =
        std::any_of(h.waiting.begin(), h.waiting.end(), [](const auto& w) { return !w.expired(); });
    if (!waited_for) host.unpin(h.slot);
    return !waited_for;
  });
}

void KvTiers::publish_events() {
  if (event_sink_ == nullptr) return;
  const Tier& t = *tiers_[0];
  if (t.disk) {
    for (const DiskTier::Change& c : t.disk->take_changes()) {
      if (c.stored) {
        event_sink_->on_tier_block_stored(KvMedium::kDisk, c.hash);
      } else {
        event_sink_->on_tier_block_removed(KvMedium::kDisk, c.hash);
      }
    }
  }
  if (t.remote) {
    for (const BlockHash& h : t.remote->take_stored()) {
      event_sink_->on_tier_block_stored(KvMedium::kRemote, h);
    }
  }
}

void KvTiers::set_event_sink(KvEventSink* sink) {
  event_sink_ = sink;
  Tier& t = *tiers_[0];
  t.host->set_event_sink(sink);
  if (sink == nullptr) return;
  if (t.disk) t.disk->log_changes();
  if (t.remote) t.remote->log_stored();
}

void KvTiers::prefetch(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                       PrefetchState& state) {
  Tier& t = *tiers_[0];
  const bool disk_reads = prefetch_ && t.io;
  if ((!disk_reads && !fetcher_) || state.pending() || state.checked_at == changes_) return;
  // Prefetched blocks waiting for their requests, and reads under way, hold at most a quarter of
  // the host tier, or they would push each other (and what other requests need) out before use.
  // Half of it for a decode instance's reads of the prefill instance: its requests need them.
  const int32_t budget =
      t.host->capacity() / (t.peer ? 2 : kPrefetchShare) - t.host->num_prefetched() -
      prefetch_reads_ - (fetcher_ ? fetcher_->blocks_in_flight() : 0) -
      static_cast<int32_t>(from_remote_.size()) - static_cast<int32_t>(claims_.size());
  if (budget <= 0) return;  // looked at again when some are served
  state.checked_at = changes_;
  // A ticket the request already has is kept (counting this walk's reads afresh): the blocks its
  // reads brought are held for the request while it holds the ticket (held_reads_).
  const bool reused = state.ticket != nullptr;
  std::shared_ptr<PrefetchTicket> ticket =
      reused ? std::move(state.ticket) : std::make_shared<PrefetchTicket>();
  ticket->blocks = 0;
  const BlockPool& pool = cache_.pool(t.group);
  const int32_t bs = cache_.block_size();
  const auto max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  const auto block_tokens = [&](int32_t i) {
    return tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs));
  };
  if (state.chain.empty()) {
    state.chain.reserve(static_cast<size_t>(std::max(max_blocks, 0)));
    for (int32_t i = 0; i < max_blocks; ++i) {
      state.chain.push_back(
          hasher_.hash(i == 0 ? nullptr : &state.chain.back(), block_tokens(i), extra));
    }
  }
  BlockId parent = kNullBlock;
  bool in_pool = true;
  int32_t pool_blocks = 0;
  for (int32_t i = 0; i < max_blocks && ticket->blocks < budget; ++i) {
    const BlockHash& h = state.chain[static_cast<size_t>(i)];
    if (in_pool) {
      if (const std::optional<BlockId> b = pool.find_cached(h, parent, block_tokens(i), extra)) {
        parent = *b;
        pool_blocks = i + 1;
        continue;
      }
      in_pool = false;
    }
    const TierKey k = t.key(h);
    if (fetcher_ && fetcher_->join(k, ticket)) continue;  // another request's read brings it
    if (t.host->contains(k) || claims_.contains(k)) continue;
    if (!t.disk || !t.disk->contains(h)) {
      // The rest of the chain, as far as the budget goes, from Redis.
      if (fetcher_) fetch_remote(t, tokens, state, i, budget - ticket->blocks, ticket);
      break;
    }
    if (!disk_reads) break;  // read at admission
    // Into a free slot or one whose block is on disk already: a prefetch writes nothing down.
    const std::optional<BlockId> slot =
        host_slot(t, k, block_tokens(i), /*wait=*/false, /*write_down=*/false);
    if (!slot) break;
    submit_read(t, *slot, k, block_tokens(i), /*keep_pinned=*/false, ticket);
  }
  if (ticket->pending == 0) {
    if (reused) state.ticket = std::move(ticket);
    return;
  }
  state.ticket = std::move(ticket);
  state.deadline = std::chrono::steady_clock::time_point::max();
  if (fetcher_ && !remote_read_always_ && read_cost_.known()) {
    const int64_t uncomputed = static_cast<int64_t>(tokens.size()) - int64_t{pool_blocks} * bs;
    state.deadline = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(
                             read_cost_.compute_seconds(state.tokens_ahead + uncomputed)));
  }
}

bool KvTiers::abandon_overdue(PrefetchState& state) {
  if (!state.pending() || std::chrono::steady_clock::now() < state.deadline) return false;
  ++stats_.num_remote_overdue;
  state.ticket.reset();
  state.deadline = std::chrono::steady_clock::time_point::max();
  return true;
}

KvTiers::Promoted KvTiers::promote(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                                   PrefixHit& hit) {
  Promoted total;
  for (;;) {
    const Progress p = promote_async(this, tokens, extra, hit);
    total.host_blocks += p.promoted.host_blocks;
    total.disk_blocks += p.promoted.disk_blocks;
    if (!p.pending) return total;
    wait_promotion();
  }
}

KvTiers::Progress KvTiers::promote_async(const void* owner, std::span<const int32_t> tokens,
                                         const BlockExtraKeys& extra, PrefixHit& hit) {
  Progress out;
  if (promotion_ && promotion_->owner != owner) cancel_promotion(promotion_->owner);
  for (;;) {
    if (promotion_) {
      // Copied at once (the CPU's mover), only the checks are left; and a stage with more behind
      // it (the host tier could not pin the chain at once) is finished here, so that the next
      // starts at once: only the last stage is left running.
      if (promotion_->ticket == BlockMover::kDoneTicket || !promotion_->last) wait_promotion();
      if (!promotion_ready()) {
        out.pending = true;
        return out;
      }
      if (!finish_promotion(tokens, extra, &hit, out.promoted)) break;
    }
    if (!start_promotion(owner, tokens, extra, hit)) break;
  }
  if (!one_full_group_) promote_copies(tokens, extra, hit, out.promoted);
  return out;
}

bool KvTiers::promotion_ready() {
  Tier& t = *tiers_[0];
  if (!promotion_ || !t.mover->copies_done(promotion_->ticket)) return false;
  start_confirm(*promotion_);
  const auto ready = [](const auto& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  return ready(promotion_->checked) &&
         (!promotion_->confirmed.valid() || ready(promotion_->confirmed));
}

void KvTiers::start_confirm(Promotion& p) {
  if (p.confirm_started) return;
  p.confirm_started = true;
  std::vector<std::shared_ptr<const PeerSlotClaim>> claims;
  std::vector<BlockId> blocks;
  for (size_t j = 0; j < p.staged.size(); ++j) {
    if (!p.staged[j].claim) continue;
    claims.push_back(p.staged[j].claim);
    blocks.push_back(p.blocks[j]);
  }
  if (claims.empty()) return;
  Tier& t = *tiers_[0];
  p.confirmed =
      std::async(std::launch::async, [&t, claims = std::move(claims), blocks = std::move(blocks)] {
        // A CPU pool's blocks are checksummed where they landed, up to the first that differs (the
        // chain ends there); a GPU pool's are vouched for by their slots' generations alone.
        std::vector<uint8_t> copied(claims.size(), 1);
        size_t asked = claims.size();
        for (size_t i = 0; i < claims.size(); ++i) {
          const std::span<const std::byte> landed = t.mover->host_block(blocks[i]);
          if (!landed.empty() && tier_checksum(landed) != claims[i]->checksum) {
            copied[i] = 0;
            asked = i + 1;
            break;
          }
        }
        std::vector<const PeerSlotClaim*> ask;
        for (size_t i = 0; i < asked; ++i) ask.push_back(claims[i].get());
        std::vector<uint8_t> ok =
            t.peer_confirm->confirm(ask, std::span<const uint8_t>(copied).first(asked));
        ok.resize(claims.size(), 0);
        return ok;
      });
}

void KvTiers::wait_promotion() {
  if (!promotion_) return;
  Tier& t = *tiers_[0];
  const auto start = std::chrono::steady_clock::now();
  t.mover->wait_copies(promotion_->ticket);
  start_confirm(*promotion_);
  promotion_->checked.wait();
  if (promotion_->confirmed.valid()) promotion_->confirmed.wait();
  stats_.up_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void KvTiers::cancel_promotion(const void* owner) {
  if (!promotion_ || promotion_->owner != owner) return;
  wait_promotion();
  Promoted ignored;
  finish_promotion({}, {}, nullptr, ignored);
}

bool KvTiers::start_promotion(const void* owner, std::span<const int32_t> tokens,
                              const BlockExtraKeys& extra, const PrefixHit& hit) {
  const auto start = std::chrono::steady_clock::now();
  Tier& t = *tiers_[0];
  BlockPool& pool = cache_.pool(0);
  const int32_t bs = cache_.block_size();
  const auto max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  const auto block_tokens = [&](int32_t i) {
    return tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs));
  };
  // The pool's cached prefix, every block of it; the chain goes on with the blocks the tiers
  // hold.
  Promotion p;
  p.owner = owner;
  PrefixHit chain = resident_chain(tokens, extra, hit);
  p.hashes = std::move(chain.hashes);
  p.resident.assign(chain.blocks().begin(), chain.blocks().end());
  const auto first = static_cast<int32_t>(p.resident.size());
  int32_t i = first;
  for (; i < max_blocks; ++i) {
    p.hashes.push_back(hasher_.hash(i == 0 ? nullptr : &p.hashes.back(), block_tokens(i), extra));
    const TierKey k = t.key(p.hashes.back());
    if (!t.host->contains(k) && !(t.disk && t.disk->contains(k.hash)) && !claims_.contains(k)) {
      break;
    }
  }
  const int32_t count = i - first;
  if (count == 0) return false;
  // Pool blocks for them; the resident prefix is held until the promotion ends, so these
  // allocations (and what they evict, written down to the host tier) and the steps meanwhile
  // cannot take it.
  pool.touch(p.resident);
  std::optional<std::vector<BlockId>> fresh = pool.allocate(std::min(count, pool.num_free_blocks()));
  if (fresh) p.blocks = std::move(*fresh);
  // Staged in pinned host slots, as many as the tier can pin (a block the host tier lacks is read
  // from disk into one, all of the stage's reads at once).
  std::vector<Staged>& stage = p.staged;
  bool broken = false;
  for (size_t j = 0; j < p.blocks.size(); ++j) {
    const int32_t b = first + static_cast<int32_t>(j);
    const TierKey k = t.key(p.hashes[static_cast<size_t>(b)]);
    while (t.host->pending(k) && apply_io(t, /*block=*/true)) {
    }  // a prefetch is reading it
    if (const std::optional<BlockId> slot = t.host->find(k, block_tokens(b))) {
      // Pinned also when it is being written down (to disk or Redis): the writer only reads it.
      t.host->pin(*slot);
      // A block a prefetch read counts as served from disk.
      stage.push_back(Staged{*slot, k, t.host->take_prefetched(*slot)});
      continue;
    }
    if (const auto claim = claims_.find(k); claim != claims_.end()) {
      stage.push_back(Staged{BlockId{}, k, false, claim->second.claim});
      continue;
    }
    if (!t.disk || !t.disk->contains(k.hash)) {
      broken = true;
      break;
    }
    const std::optional<BlockId> slot = host_slot(t, k, block_tokens(b), /*wait=*/stage.empty());
    if (!slot) {
      broken = stage.empty();
      break;  // every slot pinned: this stage first
    }
    submit_read(t, *slot, k, block_tokens(b), /*keep_pinned=*/true, nullptr);
    stage.push_back(Staged{*slot, k, true});
  }
  // The stage's reads done, it goes up as far as they succeeded.
  const auto reading = [&] {
    return std::any_of(stage.begin(), stage.end(),
                       [&](const Staged& s) { return s.from_disk && t.host->pending(s.key); });
  };
  while (reading() && apply_io(t, /*block=*/true)) {
  }
  for (size_t j = 0; j < stage.size(); ++j) {
    if (stage[j].from_disk && !t.host->contains(stage[j].key)) {  // a failed read
      for (size_t r = j + 1; r < stage.size(); ++r) {
        if (!stage[r].claim && t.host->contains(stage[r].key)) t.host->unpin(stage[r].slot);
      }
      stage.resize(j);
      broken = true;
      break;
    }
  }
  if (stage.empty()) {  // nothing could be staged: the held blocks go back as they were
    std::vector<BlockId> release(p.blocks.rbegin(), p.blocks.rend());
    release.insert(release.end(), p.resident.rbegin(), p.resident.rend());
    pool.free(release);
    return false;
  }
  p.last = broken || stage.size() == static_cast<size_t>(count);
  // The stage copies up (on the mover's copy stream or at once) while the host blocks' checksums
  // run on the check threads; a block past the good prefix is copied but never registered.
  // A claim's block comes straight out of the prefill instance's region (device to device on a
  // GPU), checked and confirmed once copied (start_confirm).
  std::vector<BlockCopy> copies;
  std::vector<RegionCopy> region_copies;
  std::vector<HostTier::Check> checks;
  for (size_t j = 0; j < stage.size(); ++j) {
    if (stage[j].claim) {
      region_copies.push_back(RegionCopy{stage[j].claim->src(), p.blocks[j]});
      continue;
    }
    copies.push_back(BlockCopy{stage[j].slot, p.blocks[j]});
    if (!stage[j].from_disk) checks.push_back(t.host->check_of(stage[j].slot));
  }
  p.checked = std::async(std::launch::async, [this, checks = std::move(checks)] {
    return HostTier::verified_prefix(checks, &check_threads_);
  });
  uint64_t ticket = BlockMover::kDoneTicket;
  if (!copies.empty()) ticket = t.mover->start_from_host(copies, std::as_const(*t.host).buffer());
  if (!region_copies.empty()) ticket = std::max(ticket, t.mover->start_from_region(region_copies));
  p.ticket = ticket;
  if (t.mover->copies_done(p.ticket)) start_confirm(p);
  promotion_ = std::move(p);
  stats_.up_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return true;
}

bool KvTiers::finish_promotion(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                               PrefixHit* hit, Promoted& promoted) {
  Tier& t = *tiers_[0];
  Promotion p = std::move(*promotion_);
  promotion_.reset();
  t.mover->wait_copies(p.ticket);
  start_confirm(p);
  // Good: host blocks whose checksum holds (the checks stop at the first that does not), blocks
  // read from disk (checked as they were read), and claims confirmed.
  const size_t good_host = p.checked.get();
  const std::vector<uint8_t> confirmed =
      p.confirmed.valid() ? p.confirmed.get() : std::vector<uint8_t>();
  size_t keep = 0;
  for (size_t host_seen = 0, claim_seen = 0; keep < p.staged.size(); ++keep) {
    const Staged& s = p.staged[keep];
    if (s.claim ? confirmed[claim_seen++] == 0 : !s.from_disk && host_seen++ == good_host) break;
  }
  bool more = !p.last;
  if (keep < p.staged.size()) {
    more = false;
    // Failed its checksum; a claim's slot was taken again, or its prefill instance is gone.
    if (!p.staged[keep].claim) t.host->erase(p.staged[keep].slot);
    ++stats_.num_faults;
  }
  for (const Staged& s : p.staged) {
    if (!s.claim && t.host->contains(s.key) && t.host->pinned(s.slot)) t.host->unpin(s.slot);
  }
  // The claim that failed is gone (recomputed); the rest are let go as they are registered, and
  // stay for a later promotion when they are not (the owner left, the chain broke before them).
  if (keep < p.staged.size() && p.staged[keep].claim) claims_.erase(p.staged[keep].key);
  // Registered in chain order, as a computed prefix would be, and appended to the hit -- unless
  // the owner left (no hit) or the hit is no longer the prefix the promotion went on from (the
  // blocks are freed uncached; the host tier still has them). With several groups or a window
  // the promotion went on from group 0's whole chain, held meanwhile: the blocks are registered,
  // and promote_copies makes the hit.
  BlockPool& pool = cache_.pool(0);
  const std::span<const BlockId> now = hit != nullptr ? hit->blocks() : std::span<const BlockId>();
  const bool extend =
      hit != nullptr && (!one_full_group_ || std::equal(now.begin(), now.end(),
                                                        p.resident.begin(), p.resident.end()));
  const int32_t bs = cache_.block_size();
  const size_t first = p.resident.size();
  size_t registered = 0;
  for (; extend && registered < keep; ++registered) {
    const size_t b = first + registered;
    const BlockHash* parent_hash = b == 0 ? nullptr : &p.hashes[b - 1];
    const BlockId parent_block =
        b == 0 ? kNullBlock : (registered == 0 ? p.resident.back() : p.blocks[registered - 1]);
    if (!pool.cache_block(p.blocks[registered], p.hashes[b], parent_hash, parent_block,
                          tokens.subspan(b * static_cast<size_t>(bs), static_cast<size_t>(bs)),
                          extra)) {
      more = false;
      break;  // the rest go back uncached and are recomputed
    }
    if (p.staged[registered].claim) claims_.erase(p.staged[registered].key);
    if (p.staged[registered].claim || from_remote_.erase(p.staged[registered].key) > 0) {
      ++stats_.num_remote_hit_blocks;
    }
    if (!one_full_group_) continue;
    if (hit->rows.empty()) hit->rows.resize(1);
    hit->rows[0].push_back(p.blocks[registered]);
    hit->hashes.push_back(p.hashes[b]);
    hit->num_tokens += bs;
  }
  // Back to the free queue, the chain's tail first: cached, the prefix evicted last.
  std::vector<BlockId> release(p.blocks.rbegin(), p.blocks.rend());
  release.insert(release.end(), p.resident.rbegin(), p.resident.rend());
  pool.free(release);
  const auto from_disk = static_cast<int32_t>(std::count_if(
      p.staged.begin(), p.staged.begin() + static_cast<int64_t>(registered),
      [](const Staged& s) { return s.from_disk; }));
  promoted.disk_blocks += from_disk;
  promoted.host_blocks += static_cast<int32_t>(registered) - from_disk;
  stats_.num_disk_hit_blocks += from_disk;
  stats_.num_host_hit_blocks += static_cast<int32_t>(registered) - from_disk;
  // A hit that moved on (not the owner's any more) is looked at again from where it is now.
  return hit != nullptr && (extend ? more && registered == keep : true);
}

void KvTiers::fetch_remote(Tier& t, std::span<const int32_t> tokens, const PrefetchState& state,
                           int32_t first, int32_t limit,
                           const std::shared_ptr<PrefetchTicket>& ticket) {
  const auto bs = static_cast<size_t>(cache_.block_size());
  const std::span<const BlockHash> chain = state.chain;
  // The chain's blocks no tier holds or brings, as far as the limit goes.
  std::vector<size_t> wanted;
  for (auto i = static_cast<size_t>(first);
       i < chain.size() && static_cast<int32_t>(wanted.size()) < limit; ++i) {
    const TierKey k = t.key(chain[i]);
    if (fetcher_->join(k, ticket) || t.host->contains(k) || claims_.contains(k)) continue;
    wanted.push_back(i);
  }
  if (wanted.empty()) return;
  // Read later, when fewer tokens are ahead of the request: read now, the blocks would be pushed
  // out of the host tier before it is admitted.
  if (!remote_read_always_ && !read_cost_.lands_in_time(state.tokens_ahead)) return;
  const auto n = static_cast<int64_t>(wanted.size());
  const auto uncomputed = static_cast<int64_t>(tokens.size() - wanted.front() * bs);
  if (!remote_read_always_ &&
      !read_cost_.read_pays(n, fetcher_->blocks_in_flight(), state.tokens_ahead + uncomputed)) {
    stats_.num_remote_skipped_blocks += n;
    return;
  }
  std::vector<RemoteFetcher::Block> blocks;
  blocks.reserve(wanted.size());
  for (const size_t i : wanted) {
    const TierKey k = t.key(chain[i]);
    const std::span<const int32_t> block_tokens = tokens.subspan(i * bs, bs);
    // Read straight into its slot: a free one, or the least recent that is on disk already.
    const std::optional<BlockId> slot =
        host_slot(t, k, block_tokens, /*wait=*/false, /*write_down=*/false);
    if (!slot) break;
    blocks.push_back(RemoteFetcher::Block{k, *slot, t.host->tokens(*slot), t.host->bytes(*slot)});
  }
  fetcher_->submit(ticket, std::move(blocks), state.remote_prefill_running);
}

bool KvTiers::apply_remote(bool block, std::chrono::steady_clock::time_point until) {
  if (!fetcher_) return false;
  release_held_reads();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<RemoteFetcher::Job>> jobs = fetcher_->take_done(block, until);
  if (block) {
    stats_.io_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (jobs.empty()) return !fetcher_->idle();
  Tier& t = *tiers_[0];
  std::erase_if(from_remote_, [&](const TierKey& k) { return !t.host->contains(k); });
  int64_t committed = 0;
  for (const std::unique_ptr<RemoteFetcher::Job>& job : jobs) {
    read_cost_.observe_read(job->read_blocks, job->read_seconds);
    // The chain ends at the first block Redis lacks (or failed): the slots past it go back.
    bool chain = true;
    for (size_t i = 0; i < job->gets.size(); ++i) {
      const RemoteFetcher::Block& b = job->blocks[i];
      chain = chain && job->gets[i].status.ok();
      if (!chain) {
        t.host->erase(b.slot);
        continue;
      }
      if (job->gets[i].claim) {
        // Left in the prefill instance's region: its host slot goes back unused, and the
        // promotion copies it from there into the pool.
        t.host->erase(b.slot);
        claims_.insert_or_assign(b.key, Claim{std::move(job->gets[i].claim), ++claims_seen_});
        ++committed;
        continue;
      }
      t.host->commit(b.slot, job->gets[i].checksum);  // checked as it was read
      // Held for the requests that still wait for it: a ticket is theirs while someone besides
      // this job holds it -- its request's PrefetchState, or another job it joined, which ends
      // soon; a hold whose tickets have all gone is released at the next apply.
      HeldRead held{b.slot, {}};
      for (const std::shared_ptr<PrefetchTicket>& ticket : job->tickets) {
        if (ticket.use_count() > 1) held.waiting.push_back(ticket);
      }
      if (held.waiting.empty()) {
        t.host->unpin(b.slot);
      } else {
        held_reads_.push_back(std::move(held));
      }
      from_remote_.insert(b.key);
      ++committed;
    }
    for (const std::shared_ptr<PrefetchTicket>& ticket : job->tickets) --ticket->pending;
  }
  stats_.num_remote_fetched_blocks += committed;
  const auto max_claims = static_cast<size_t>(std::max(1, t.host->capacity() / 2));
  while (claims_.size() > max_claims) {
    claims_.erase(
        std::min_element(claims_.begin(), claims_.end(),
                         [](const auto& a, const auto& b) { return a.second.seq < b.second.seq; }));
  }
  // Blocks that came let the waiting requests' prefetches walk further; a read that found
  // nothing (or no answer) is not asked again until blocks move.
  if (committed > 0) ++changes_;
  return true;
}

PrefixHit KvTiers::resident_chain(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                                  const PrefixHit& hit) const {
  if (one_full_group_) return hit;
  return cache_.cached_chain(tokens, extra);
}

std::optional<BlockId> KvTiers::stage_now(Tier& t, const TierKey& key,
                                          std::span<const int32_t> tokens, bool& from_disk) {
  while (t.host->pending(key) && apply_io(t, /*block=*/true)) {
  }  // a read is under way
  if (t.host->pending(key)) return std::nullopt;  // a read from Redis fills it: not waited for
  if (const std::optional<BlockId> slot = t.host->find(key, tokens)) {
    t.host->pin(*slot);  // (pins nest: one being written down is copied up meanwhile)
    from_disk = t.host->take_prefetched(*slot);
    return slot;
  }
  if (!t.disk || !t.disk->contains(key.hash)) return std::nullopt;
  const std::optional<BlockId> slot = host_slot(t, key, tokens, /*wait=*/true);
  if (!slot) return std::nullopt;
  submit_read(t, *slot, key, tokens, /*keep_pinned=*/true, nullptr);
  while (t.host->pending(key) && apply_io(t, /*block=*/true)) {
  }
  if (!t.host->contains(key)) return std::nullopt;  // the read failed (counted)
  from_disk = true;
  return slot;
}

void KvTiers::promote_copies(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                             PrefixHit& hit, Promoted& promoted) {
  const auto start = std::chrono::steady_clock::now();
  const int32_t bs = cache_.block_size();
  const int32_t before = hit.num_tokens / bs;
  PrefixHit chain = cache_.cached_chain(tokens, extra);
  const auto block_tokens = [&](int32_t i) {
    return tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs));
  };
  struct Need {
    int32_t block;  // in the chain
    BlockId slot;   // pinned
    TierKey key;
    bool from_disk = false;
  };
  bool any_from_disk = false;
  auto h = static_cast<int32_t>(chain.blocks().size());
  while (h > before) {
    // What each later group needs for a hit of h blocks and its pool lacks, staged in its tiers;
    // a block no tier has cuts h to it (as find_cached_prefix's cut would), and the look starts
    // over.
    std::vector<std::vector<Need>> needs(static_cast<size_t>(cache_.num_groups()));
    int32_t missing = -1;
    for (int32_t g = 1; g < cache_.num_groups(); ++g) {
      Tier* t = tiers_[static_cast<size_t>(g)].get();
      for (int32_t j = cache_.group_spec(g).first_needed_block(h * bs, bs); j < h; ++j) {
        const BlockId primary = chain.rows[0][static_cast<size_t>(j)];
        if (cache_.group_copy(g, primary)) continue;
        // A copy the group's pool still caches, linked to the block group 0 held before its
        // own eviction (the chain's block came back from the tiers): linked again.
        if (const std::optional<BlockId> kept = cache_.pool(g).find_cached(
                chain.hashes[static_cast<size_t>(j)], kNullBlock, block_tokens(j), extra);
            kept && cache_.cache_group_copy(g, *kept, primary, chain.hashes[static_cast<size_t>(j)],
                                            block_tokens(j), extra)) {
          continue;
        }
        bool from_disk = false;
        const TierKey key = t == nullptr ? TierKey{} : t->key(chain.hashes[static_cast<size_t>(j)]);
        const std::optional<BlockId> slot =
            t == nullptr ? std::nullopt : stage_now(*t, key, block_tokens(j), from_disk);
        if (!slot) {
          missing = std::max(missing, j);
          continue;
        }
        needs[static_cast<size_t>(g)].push_back(Need{j, *slot, key, from_disk});
      }
    }
    const auto unpin = [&](int32_t g) {
      if (needs[static_cast<size_t>(g)].empty()) return;  // (a group without tiers needs none)
      Tier& t = *tiers_[static_cast<size_t>(g)];
      for (const Need& n : needs[static_cast<size_t>(g)]) {
        if (t.host->contains(n.key) && t.host->pinned(n.slot)) t.host->unpin(n.slot);
      }
    };
    if (missing >= 0) {
      for (int32_t g = 1; g < cache_.num_groups(); ++g) unpin(g);
      h = missing;
      continue;
    }
    // Up into fresh blocks of each group's pool, checked, cached and linked to group 0's blocks.
    int32_t bad = -1;
    for (int32_t g = 1; g < cache_.num_groups(); ++g) {
      std::vector<Need>& need = needs[static_cast<size_t>(g)];
      if (need.empty()) continue;
      Tier& t = *tiers_[static_cast<size_t>(g)];
      BlockPool& pool = cache_.pool(g);
      // The copies the hit uses that the pool has are held while the allocation evicts.
      std::vector<BlockId> held;
      for (int32_t j = cache_.group_spec(g).first_needed_block(h * bs, bs); j < h; ++j) {
        if (const std::optional<BlockId> c =
                cache_.group_copy(g, chain.rows[0][static_cast<size_t>(j)])) {
          held.push_back(*c);
        }
      }
      pool.touch(held);
      std::optional<std::vector<BlockId>> fresh =
          pool.allocate(static_cast<int32_t>(need.size()));
      if (!fresh) {
        pool.free(held);
        for (int32_t r = g; r < cache_.num_groups(); ++r) unpin(r);
        bad = 0;  // the pool cannot take them: the hit stays as find_cached_prefix cuts it
        h = before;
        break;
      }
      std::vector<BlockCopy> copies;
      for (size_t k = 0; k < need.size(); ++k) {
        copies.push_back(BlockCopy{need[k].slot, (*fresh)[k]});
      }
      t.mover->from_host(copies, std::as_const(*t.host).buffer());
      for (size_t k = 0; k < need.size(); ++k) {
        const Need& n = need[k];
        const auto j = static_cast<size_t>(n.block);
        if (!n.from_disk && !t.host->verify(n.slot)) {
          t.host->erase(n.slot);
          ++stats_.num_faults;
          bad = std::max(bad, n.block);
          continue;
        }
        t.host->unpin(n.slot);
        cache_.cache_group_copy(g, (*fresh)[k], chain.rows[0][j], chain.hashes[j],
                                block_tokens(n.block), extra);
        any_from_disk = any_from_disk || n.from_disk;
      }
      std::vector<BlockId> release(fresh->rbegin(), fresh->rend());
      release.insert(release.end(), held.begin(), held.end());
      pool.free(release);
    }
    if (bad < 0) break;
    h = std::min(h, bad);
  }
  hit = cache_.hit_of(std::move(chain));
  // Blocks of the hit beyond the call's and group 0's promotion: made usable by copies that
  // later groups' tiers brought back.
  const int32_t gained = hit.num_tokens / bs - before -
                         (promoted.host_blocks + promoted.disk_blocks);
  if (gained > 0) (any_from_disk ? promoted.disk_blocks : promoted.host_blocks) += gained;
  stats_.up_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace strata::kv

#include "kv/kv_tiers.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

namespace strata::kv {

Result<std::unique_ptr<KvTiers>> KvTiers::create(const KvTierConfig& config, KvCacheManager& cache,
                                                 BlockMover& mover) {
  if (cache.num_groups() != 1 || cache.group_spec(0).kind != KvGroupKind::kFullAttention) {
    return Status::InvalidArgument(
        "--kv-offload-bytes: KV tiers hold caches of one full-attention group (no sliding "
        "window, no int4 cache) for now");
  }
  if (!cache.prefix_caching()) {
    return Status::InvalidArgument("--kv-offload-bytes needs prefix caching (the tiers' key)");
  }
  const KvLayout layout(cache.group_spec(0).kv, cache.block_size());
  const int64_t block_bytes = layout.block_bytes();
  if (config.host_bytes < block_bytes) {
    if (!config.disk_path.empty()) {
      return Status::InvalidArgument(
          "--kv-disk-path needs --kv-offload-bytes: the disk tier "
          "reads and writes through the host tier");
    }
    return Status::InvalidArgument("--kv-offload-bytes " + std::to_string(config.host_bytes) +
                                   " holds no block (one takes " + std::to_string(block_bytes) +
                                   " bytes)");
  }
  const auto capacity = static_cast<int32_t>(
      std::min<int64_t>(config.host_bytes / block_bytes, std::numeric_limits<int32_t>::max() - 1));
  auto host = std::make_unique<HostTier>(layout, capacity);
  std::unique_ptr<DiskTier> disk;
  if (!config.disk_path.empty()) {
    Result<std::unique_ptr<DiskTier>> opened = DiskTier::open(
        config.disk_path, config.ns, cache.block_size(), block_bytes, config.disk_bytes);
    if (!opened.ok()) return opened.status();
    disk = std::move(opened).value();
  }
  return std::unique_ptr<KvTiers>(
      new KvTiers(config, cache, mover, std::move(host), std::move(disk)));
}

KvTiers::KvTiers(const KvTierConfig& config, KvCacheManager& cache, BlockMover& mover,
                 std::unique_ptr<HostTier> host, std::unique_ptr<DiskTier> disk)
    : ns_(config.ns),
      policy_(config.policy),
      prefetch_(config.prefetch),
      cache_(cache),
      mover_(mover),
      host_(std::move(host)),
      disk_(std::move(disk)),
      io_(disk_ ? std::make_unique<TierIo>(*disk_) : nullptr),
      hasher_(cache.hash_bits()),
      threads_(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u))),
      check_threads_(threads_.num_threads()) {
  mover_.attach(host_->buffer());
  cache_.pool().set_listener(this);
}

KvTiers::~KvTiers() {
  if (promotion_) cancel_promotion(promotion_->owner);
  cache_.pool().set_listener(nullptr);
  io_.reset();  // its jobs finish before the slots they touch go
  mover_.detach(host_->buffer());
}

bool KvTiers::apply_io(bool block) {
  if (!io_) return false;
  if (block) {
    const auto start = std::chrono::steady_clock::now();
    const bool any = io_->wait_any();
    stats_.io_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!any) return false;
  }
  for (TierIo::Done& d : io_->take_done()) {
    const TierIo::Job& job = d.job;
    if (job.write) {
      // The block is on disk now (or the write failed and it is only in memory): the slot may go.
      (d.status.ok() ? stats_.num_disk_writes : stats_.num_faults) += 1;
      ++changes_;
      host_->unpin(job.slot, /*least_recent=*/true);
      continue;
    }
    stats_.disk_read_seconds += d.seconds;
    if (job.ticket) {
      --job.ticket->pending;
      --prefetch_reads_;
    }
    if (!d.status.ok()) {
      if (d.status.code() != StatusCode::kNotFound) ++stats_.num_faults;
      host_->erase(job.slot);
      continue;
    }
    host_->commit(job.slot, job.checksum, /*prefetched=*/job.ticket != nullptr);  // checked
    if (job.ticket) ++stats_.num_prefetched_blocks;
    if (!job.keep_pinned) host_->unpin(job.slot);
  }
  return true;
}

std::optional<BlockId> KvTiers::host_slot(const TierKey& key, std::span<const int32_t> tokens,
                                          bool wait, bool write_down) {
  for (;;) {
    if (host_->num_free() == 0) {
      const std::optional<BlockId> victim = host_->least_recent();
      // Unpinned slots are committed; one whose block is not on disk yet goes there first, a
      // few writes at a time (the next least recent ones start while the first are written).
      const bool needs_write = victim && disk_ && !disk_->contains(host_->key(*victim).hash);
      if (needs_write && !write_down) return std::nullopt;
      if (!victim || (needs_write && io_->writes_outstanding() >= kMaxWritesAhead)) {
        if (wait && apply_io(/*block=*/true)) continue;
        return std::nullopt;
      }
      if (needs_write) {
        host_->pin(*victim);
        io_->submit(TierIo::Job{.write = true,
                                .slot = *victim,
                                .hash = host_->key(*victim).hash,
                                .tokens = {host_->tokens(*victim).begin(),
                                           host_->tokens(*victim).end()},
                                .bytes = host_->bytes(*victim),
                                .checksum = host_->checksum(*victim),
                                .keep_pinned = false,
                                .ticket = nullptr});
        continue;
      }
    }
    const std::optional<BlockId> slot = host_->insert(key, tokens);
    if (slot) host_->pin(*slot);
    return slot;
  }
}

void KvTiers::submit_read(BlockId slot, const TierKey& key, std::span<const int32_t> tokens,
                          bool keep_pinned, std::shared_ptr<PrefetchTicket> ticket) {
  if (ticket) {
    ++ticket->pending;
    ++ticket->blocks;
    ++prefetch_reads_;
  }
  io_->submit(TierIo::Job{.write = false,
                          .slot = slot,
                          .hash = key.hash,
                          .tokens = {tokens.begin(), tokens.end()},
                          .bytes = host_->bytes(slot),
                          .checksum = 0,
                          .keep_pinned = keep_pinned,
                          .ticket = std::move(ticket)});
}

void KvTiers::on_cached(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens) {
  if (policy_ != OffloadPolicy::kWriteThrough || host_->contains(key(hash))) return;
  cached_.push_back(
      Cached{block, cache_.pool().cache_gen(block), hash, {tokens.begin(), tokens.end()}});
}

size_t KvTiers::chunk_blocks() const {
  return static_cast<size_t>(std::max<int64_t>(1, kPipelineChunkBytes / host_->block_bytes()));
}

void KvTiers::copy_down(DownBatch& batch) {
  if (batch.copies.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  // Chunk by chunk: the checksums of one on the tiers' threads while the next one copies.
  const size_t n = batch.copies.size();
  const size_t chunk = chunk_blocks();
  const std::span<const BlockCopy> copies(batch.copies);
  const std::span<const BlockId> slots(batch.slots);
  std::future<void> sums;
  for (size_t begin = 0; begin < n; begin += chunk) {
    const size_t len = std::min(chunk, n - begin);
    mover_.to_host(copies.subspan(begin, len), host_->buffer());
    if (sums.valid()) sums.get();
    const std::span<const BlockId> done = slots.subspan(begin, len);
    if (begin + len == n) {
      host_->commit(done, &threads_);
    } else {
      sums = std::async(std::launch::async, [this, done] { host_->commit(done, &threads_); });
    }
  }
  for (const BlockId s : batch.slots) host_->unpin(s);
  stats_.num_offloaded_blocks += static_cast<int64_t>(n);
  stats_.down_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  batch.copies.clear();
  batch.slots.clear();
}

void KvTiers::on_evicted(std::span<const EvictedBlock> blocks) {
  ++changes_;
  // One copy for the whole batch; its slots stay pinned until it is copied, so when every slot
  // is taken the batch so far goes first.
  DownBatch batch;
  for (const EvictedBlock& b : blocks) {
    const TierKey k = key(b.hash);
    if (host_->contains(k)) continue;  // written down before (or being read back): never twice
    std::optional<BlockId> slot = host_slot(k, b.tokens, /*wait=*/true);
    if (!slot && !batch.copies.empty()) {
      copy_down(batch);
      slot = host_slot(k, b.tokens, /*wait=*/true);
    }
    if (!slot) {
      ++stats_.num_dropped_blocks;
      continue;
    }
    batch.copies.push_back(BlockCopy{b.block, *slot});
    batch.slots.push_back(*slot);
  }
  copy_down(batch);
}

void KvTiers::write_through() {
  const BlockPool& pool = cache_.pool();
  DownBatch batch;
  for (const Cached& c : cached_) {
    const TierKey k = key(c.hash);
    // Evicted since (and written down then), or cached again with other content: nothing to do.
    if (host_->contains(k) || !pool.is_cached(c.block) || pool.cache_gen(c.block) != c.cache_gen) {
      continue;
    }
    std::optional<BlockId> slot = host_slot(k, c.tokens, /*wait=*/false);
    if (!slot && !batch.copies.empty()) {
      copy_down(batch);
      slot = host_slot(k, c.tokens, /*wait=*/false);
    }
    if (!slot) break;  // the rest go down when evicted
    batch.copies.push_back(BlockCopy{c.block, *slot});
    batch.slots.push_back(*slot);
  }
  copy_down(batch);
  cached_.clear();
}

void KvTiers::poll() {
  apply_io(/*block=*/false);
  if (!cached_.empty()) write_through();
}

void KvTiers::prefetch(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                       PrefetchState& state) {
  if (!prefetch_ || !io_ || state.pending() || state.checked_at == changes_) return;
  // Prefetched blocks waiting for their requests, and reads under way, hold at most a quarter of
  // the host tier, or they would push each other (and what other requests need) out before use.
  const int32_t budget =
      host_->capacity() / kPrefetchShare - host_->num_prefetched() - prefetch_reads_;
  if (budget <= 0) return;  // looked at again when some are served
  state.checked_at = changes_;
  state.ticket.reset();
  const BlockPool& pool = cache_.pool();
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
  auto ticket = std::make_shared<PrefetchTicket>();
  BlockId parent = kNullBlock;
  bool in_pool = true;
  for (int32_t i = 0; i < max_blocks && ticket->blocks < budget; ++i) {
    const BlockHash& h = state.chain[static_cast<size_t>(i)];
    if (in_pool) {
      if (const std::optional<BlockId> b = pool.find_cached(h, parent, block_tokens(i), extra)) {
        parent = *b;
        continue;
      }
      in_pool = false;
    }
    const TierKey k = key(h);
    if (host_->contains(k)) continue;
    if (!disk_->contains(h)) break;
    // Into a free slot or one whose block is on disk already: a prefetch writes nothing down.
    const std::optional<BlockId> slot =
        host_slot(k, block_tokens(i), /*wait=*/false, /*write_down=*/false);
    if (!slot) break;
    submit_read(*slot, k, block_tokens(i), /*keep_pinned=*/false, ticket);
  }
  if (ticket->blocks > 0) state.ticket = std::move(ticket);
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
      if (!finish_promotion(tokens, extra, &hit, out.promoted)) return out;
    }
    if (!start_promotion(owner, tokens, extra, hit)) return out;
  }
}

bool KvTiers::promotion_ready() {
  return promotion_ && mover_.copies_done(promotion_->ticket) &&
         promotion_->checked.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

void KvTiers::wait_promotion() {
  if (!promotion_) return;
  const auto start = std::chrono::steady_clock::now();
  mover_.wait_copies(promotion_->ticket);
  promotion_->checked.wait();
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
  BlockPool& pool = cache_.pool();
  const int32_t bs = cache_.block_size();
  const auto max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  const auto block_tokens = [&](int32_t i) {
    return tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs));
  };
  // The pool's cached prefix is the hit (one full-attention group: every block of it in row 0);
  // the chain goes on with the blocks the tiers hold.
  Promotion p;
  p.owner = owner;
  p.hashes = hit.hashes;
  p.resident.assign(hit.blocks().begin(), hit.blocks().end());
  const auto first = static_cast<int32_t>(p.resident.size());
  int32_t i = first;
  for (; i < max_blocks; ++i) {
    p.hashes.push_back(hasher_.hash(i == 0 ? nullptr : &p.hashes.back(), block_tokens(i), extra));
    const TierKey k = key(p.hashes.back());
    if (!host_->contains(k) && !(disk_ && disk_->contains(k.hash))) break;
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
    const TierKey k = key(p.hashes[static_cast<size_t>(b)]);
    while (host_->pending(k) && apply_io(/*block=*/true)) {
    }  // a prefetch is reading it
    if (const std::optional<BlockId> slot = host_->find(k, block_tokens(b))) {
      if (host_->pinned(*slot)) {  // being written down: copy it up before it can go
        if (!stage.empty()) break;
        while (host_->pinned(*slot) && apply_io(/*block=*/true)) {
        }
      }
      host_->pin(*slot);
      // A block a prefetch read counts as served from disk.
      stage.push_back(Staged{*slot, k, host_->take_prefetched(*slot)});
      continue;
    }
    if (!disk_ || !disk_->contains(k.hash)) {
      broken = true;
      break;
    }
    const std::optional<BlockId> slot = host_slot(k, block_tokens(b), /*wait=*/stage.empty());
    if (!slot) {
      broken = stage.empty();
      break;  // every slot pinned: this stage first
    }
    submit_read(*slot, k, block_tokens(b), /*keep_pinned=*/true, nullptr);
    stage.push_back(Staged{*slot, k, true});
  }
  // The stage's reads done, it goes up as far as they succeeded.
  const auto reading = [&] {
    return std::any_of(stage.begin(), stage.end(),
                       [&](const Staged& s) { return s.from_disk && host_->pending(s.key); });
  };
  while (reading() && apply_io(/*block=*/true)) {
  }
  for (size_t j = 0; j < stage.size(); ++j) {
    if (stage[j].from_disk && !host_->contains(stage[j].key)) {  // a failed read
      for (size_t r = j + 1; r < stage.size(); ++r) {
        if (host_->contains(stage[r].key)) host_->unpin(stage[r].slot);
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
  std::vector<BlockCopy> copies;
  std::vector<HostTier::Check> checks;
  for (size_t j = 0; j < stage.size(); ++j) {
    copies.push_back(BlockCopy{stage[j].slot, p.blocks[j]});
    if (!stage[j].from_disk) checks.push_back(host_->check_of(stage[j].slot));
  }
  p.checked = std::async(std::launch::async, [this, checks = std::move(checks)] {
    return HostTier::verified_prefix(checks, &check_threads_);
  });
  p.ticket = mover_.start_from_host(copies, std::as_const(*host_).buffer());
  promotion_ = std::move(p);
  stats_.up_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return true;
}

bool KvTiers::finish_promotion(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                               PrefixHit* hit, Promoted& promoted) {
  Promotion p = std::move(*promotion_);
  promotion_.reset();
  mover_.wait_copies(p.ticket);
  // Good: host blocks whose checksum holds (the checks stop at the first that does not), and
  // blocks read from disk (checked as they were read).
  const size_t good_host = p.checked.get();
  size_t keep = 0;
  for (size_t host_seen = 0; keep < p.staged.size(); ++keep) {
    if (!p.staged[keep].from_disk && host_seen++ == good_host) break;
  }
  bool more = !p.last;
  if (keep < p.staged.size()) {
    more = false;
    host_->erase(p.staged[keep].slot);  // failed its checksum
    ++stats_.num_faults;
  }
  for (const Staged& s : p.staged) {
    if (host_->contains(s.key) && host_->pinned(s.slot)) host_->unpin(s.slot);  // not erased
  }
  // Registered in chain order, as a computed prefix would be, and appended to the hit -- unless
  // the owner left (no hit) or the hit is no longer the prefix the promotion went on from (the
  // blocks are freed uncached; the host tier still has them).
  BlockPool& pool = cache_.pool();
  const std::span<const BlockId> now = hit != nullptr ? hit->blocks() : std::span<const BlockId>();
  const bool extend =
      hit != nullptr && std::equal(now.begin(), now.end(), p.resident.begin(), p.resident.end());
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

}  // namespace strata::kv

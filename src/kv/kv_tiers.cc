#include "kv/kv_tiers.h"

#include <algorithm>
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
      cache_(cache),
      mover_(mover),
      host_(std::move(host)),
      disk_(std::move(disk)),
      hasher_(cache.hash_bits()),
      threads_(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u))) {
  mover_.attach(host_->buffer());
  cache_.pool().set_eviction_listener(this);
}

KvTiers::~KvTiers() {
  cache_.pool().set_eviction_listener(nullptr);
  mover_.detach(host_->buffer());
}

BlockId KvTiers::host_slot(const TierKey& key, std::span<const int32_t> tokens) {
  std::optional<HostTier::Dropped> dropped;
  const BlockId slot = host_->insert(key, tokens, disk_ ? &dropped : nullptr);
  // insert() left the dropped block's bytes in the slot until it is overwritten; they go down with
  // the checksum they came with, so a change since is caught when the file is read.
  if (dropped && !disk_->contains(dropped->key.hash)) {
    if (disk_->put(dropped->key.hash, dropped->tokens, host_->bytes(slot), dropped->checksum)
            .ok()) {
      ++stats_.num_disk_writes;
    } else {
      ++stats_.num_faults;
    }
  }
  return slot;
}

void KvTiers::on_evicted(std::span<const EvictedBlock> blocks) {
  // One copy for the whole batch, checksums on the tiers' threads. The batch's slots are the host
  // tier's most recent, so an insert drops one of them only once the batch fills the tier: copy
  // what is pending first.
  std::vector<BlockCopy> pending;
  std::vector<BlockId> slots;
  const auto flush = [&] {
    mover_.to_host(pending, host_->buffer());
    host_->commit(slots, &threads_);
    stats_.num_offloaded_blocks += static_cast<int64_t>(pending.size());
    pending.clear();
    slots.clear();
  };
  for (const EvictedBlock& b : blocks) {
    const TierKey k = key(b.hash);
    if (host_->contains(k)) continue;  // written down before: never twice
    if (static_cast<int32_t>(pending.size()) == host_->capacity()) flush();
    const BlockId slot = host_slot(k, b.tokens);
    pending.push_back(BlockCopy{b.block, slot});
    slots.push_back(slot);
  }
  if (!pending.empty()) flush();
}

KvTiers::Promoted KvTiers::promote(std::span<const int32_t> tokens, const BlockExtraKeys& extra,
                                   PrefixHit& hit) {
  Promoted out;
  BlockPool& pool = cache_.pool();
  const int32_t bs = cache_.block_size();
  const auto max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  const auto block_tokens = [&](int32_t i) {
    return tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs), static_cast<size_t>(bs));
  };
  // The pool's cached prefix is the hit (one full-attention group: every block of it in row 0);
  // the chain goes on with the blocks the tiers hold.
  std::vector<BlockHash> hashes = hit.hashes;
  const std::vector<BlockId> resident(hit.blocks().begin(), hit.blocks().end());
  const auto first = static_cast<int32_t>(resident.size());
  int32_t i = first;
  for (; i < max_blocks; ++i) {
    hashes.push_back(hasher_.hash(i == 0 ? nullptr : &hashes.back(), block_tokens(i), extra));
    const TierKey k = key(hashes.back());
    if (!host_->contains(k) && !(disk_ && disk_->contains(k.hash))) break;
  }
  const int32_t count = i - first;
  if (count == 0) return out;
  // Pool blocks for them; the resident prefix is held meanwhile, so these allocations (and what
  // they evict, written down to the host tier) cannot take it.
  pool.touch(resident);
  std::optional<std::vector<BlockId>> fresh = pool.allocate(std::min(count, pool.num_free_blocks()));
  std::vector<BlockId> blocks = fresh ? std::move(*fresh) : std::vector<BlockId>{};
  // Staged in host slots (read from disk where the host tier lacks a block) a tier's worth at a
  // time -- a later staging may reuse an earlier slot -- checked, then copied up in one piece.
  size_t done = 0;
  bool broken = false;
  while (done < blocks.size() && !broken) {
    std::vector<BlockId> staged, from_host;
    std::vector<bool> read_from_disk;  // per staged block
    for (size_t j = done; j < blocks.size() && static_cast<int32_t>(staged.size()) <
                                                  host_->capacity(); ++j) {
      const int32_t b = first + static_cast<int32_t>(j);
      const TierKey k = key(hashes[static_cast<size_t>(b)]);
      if (const std::optional<BlockId> slot = host_->find(k, block_tokens(b))) {
        staged.push_back(*slot);
        from_host.push_back(*slot);
        read_from_disk.push_back(false);
        continue;
      }
      if (!disk_ || !disk_->contains(k.hash)) {
        broken = true;
        break;
      }
      const BlockId s = host_slot(k, block_tokens(b));
      uint64_t checksum = 0;
      if (!disk_->get(k.hash, block_tokens(b), host_->bytes(s), &checksum).ok()) {
        host_->erase(s);
        ++stats_.num_faults;
        broken = true;
        break;
      }
      host_->commit(s, checksum);  // checked as it was read
      staged.push_back(s);
      read_from_disk.push_back(true);
    }
    const size_t good = host_->verify_prefix(from_host, &threads_);
    size_t keep = staged.size();
    if (good < from_host.size()) {
      keep = static_cast<size_t>(std::find(staged.begin(), staged.end(), from_host[good]) -
                                 staged.begin());
      host_->erase(from_host[good]);
      ++stats_.num_faults;
      broken = true;
    }
    std::vector<BlockCopy> copies;
    for (size_t k = 0; k < keep; ++k) copies.push_back(BlockCopy{staged[k], blocks[done + k]});
    mover_.from_host(copies, host_->buffer());
    const auto disk = static_cast<int32_t>(
        std::count(read_from_disk.begin(), read_from_disk.begin() + static_cast<int64_t>(keep), true));
    out.disk_blocks += disk;
    out.host_blocks += static_cast<int32_t>(keep) - disk;
    done += keep;
  }
  // Registered in chain order, as a computed prefix would be, and appended to the hit.
  for (size_t j = 0; j < done; ++j) {
    const size_t b = static_cast<size_t>(first) + j;
    const BlockHash* parent_hash = b == 0 ? nullptr : &hashes[b - 1];
    const BlockId parent_block = b == 0 ? kNullBlock : (j == 0 ? resident.back() : blocks[j - 1]);
    if (!pool.cache_block(blocks[j], hashes[b], parent_hash, parent_block,
                          block_tokens(static_cast<int32_t>(b)), extra)) {
      break;  // the rest go back uncached and are recomputed
    }
    hit.rows[0].push_back(blocks[j]);
    hit.hashes.push_back(hashes[b]);
    hit.num_tokens += bs;
  }
  // Back to the free queue, the chain's tail first: cached, the prefix evicted last.
  std::vector<BlockId> release(blocks.rbegin(), blocks.rend());
  release.insert(release.end(), resident.rbegin(), resident.rend());
  pool.free(release);
  stats_.num_host_hit_blocks += out.host_blocks;
  stats_.num_disk_hit_blocks += out.disk_blocks;
  return out;
}

}  // namespace strata::kv

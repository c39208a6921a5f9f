#include "kv/kv_tiers.h"

#include <algorithm>
#include <limits>
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
      hasher_(cache.hash_bits()) {
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
  // insert() left the dropped block's bytes in the slot until it is overwritten.
  if (dropped && !disk_->contains(dropped->key.hash) &&
      tier_checksum(host_->bytes(slot)) == dropped->checksum) {
    if (disk_->put(dropped->key.hash, dropped->tokens, host_->bytes(slot)).ok()) {
      ++stats_.num_disk_writes;
    } else {
      ++stats_.num_faults;
    }
  }
  return slot;
}

void KvTiers::on_evicted(std::span<const EvictedBlock> blocks) {
  for (const EvictedBlock& b : blocks) {
    const TierKey k = key(b.hash);
    if (host_->contains(k)) continue;  // written down before: never twice
    const BlockId slot = host_slot(k, b.tokens);
    const BlockCopy copy{b.block, slot};
    mover_.to_host({&copy, 1}, host_->buffer());
    host_->commit(slot);
    ++stats_.num_offloaded_blocks;
  }
}

KvTiers::Promoted KvTiers::promote(std::span<const int32_t> tokens, const BlockExtraKeys& extra) {
  Promoted out;
  BlockPool& pool = cache_.pool();
  const int32_t bs = cache_.block_size();
  const auto max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  const auto block_tokens = [&](int32_t i) {
    return tokens.subspan(static_cast<size_t>(i) * static_cast<size_t>(bs),
                          static_cast<size_t>(bs));
  };
  // The pool's cached prefix, then the chain's blocks the tiers hold.
  std::vector<BlockHash> hashes;
  std::vector<BlockId> resident;
  BlockId parent = kNullBlock;
  int32_t i = 0;
  for (; i < max_blocks; ++i) {
    hashes.push_back(hasher_.hash(i == 0 ? nullptr : &hashes.back(), block_tokens(i), extra));
    const std::optional<BlockId> b =
        pool.find_cached(hashes.back(), parent, block_tokens(i), extra);
    if (!b) break;
    resident.push_back(*b);
    parent = *b;
  }
  const int32_t first = i;
  for (; i < max_blocks; ++i) {
    if (i > first) hashes.push_back(hasher_.hash(&hashes.back(), block_tokens(i), extra));
    const TierKey k = key(hashes.back());
    if (!host_->contains(k) && !(disk_ && disk_->contains(k.hash))) break;
  }
  const int32_t count = i - first;
  if (count == 0) return out;
  // Pool blocks for them; the resident prefix is held meanwhile, so these allocations (and what
  // they evict, written down to the host tier) cannot take it.
  pool.touch(resident);
  std::optional<std::vector<BlockId>> fresh =
      pool.allocate(std::min(count, pool.num_free_blocks()));
  std::vector<BlockId> blocks = fresh ? std::move(*fresh) : std::vector<BlockId>{};
  // Each block into a host slot (from disk if it is not there), checked, then up to the pool at
  // once: a later block's staging may reuse the slot.
  std::vector<BlockCopy> copies;
  for (size_t j = 0; j < blocks.size(); ++j) {
    const int32_t b = first + static_cast<int32_t>(j);
    const TierKey k = key(hashes[static_cast<size_t>(b)]);
    std::optional<BlockId> slot = host_->find(k, block_tokens(b));
    bool from_disk = false;
    if (!slot && disk_ && disk_->contains(k.hash)) {
      const BlockId s = host_slot(k, block_tokens(b));
      if (disk_->get(k.hash, block_tokens(b), host_->bytes(s)).ok()) {
        host_->commit(s);
        slot = s;
        from_disk = true;
      } else {
        host_->erase(s);
        ++stats_.num_faults;
        break;
      }
    }
    if (!slot) break;
    if (!host_->verify(*slot)) {
      host_->erase(*slot);
      ++stats_.num_faults;
      break;
    }
    copies.push_back(BlockCopy{*slot, blocks[j]});
    mover_.from_host({&copies.back(), 1}, host_->buffer());
    ++(from_disk ? out.disk_blocks : out.host_blocks);
  }
  // Registered in chain order, as a computed prefix would be.
  for (size_t j = 0; j < copies.size(); ++j) {
    const size_t b = static_cast<size_t>(first) + j;
    const BlockHash* parent_hash = b == 0 ? nullptr : &hashes[b - 1];
    const BlockId parent_block = b == 0 ? kNullBlock : (j == 0 ? resident.back() : blocks[j - 1]);
    if (!pool.cache_block(blocks[j], hashes[b], parent_hash, parent_block,
                          block_tokens(static_cast<int32_t>(b)), extra)) {
      break;  // the rest go back uncached and are recomputed
    }
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

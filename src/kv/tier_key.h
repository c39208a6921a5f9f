#pragma once
// The key of a block in the KV tiers under the pool (host memory, local disk; docs/kv.md, "KV
// tiers"): the block's chain hash -- the prefix cache's key, so the whole prefix, the cache salt
// and the adapter are in it -- and a namespace that makes the block unusable by any other model,
// KV dtype, block size, group spec or tier format (tier_namespace). A tier stores the block's
// token ids beside its bytes and confirms them on every hit, and a checksum of the bytes
// (xxHash's XXH3, 64 bits) that every read verifies before the block is used.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "kv/block_hash.h"
#include "kv/kv_group.h"
#include "kv/kv_layout.h"

namespace strata::kv {

struct TierKey {
  uint64_t ns = 0;
  BlockHash hash;

  bool operator==(const TierKey&) const = default;
};

struct TierKeyHasher {
  size_t operator()(const TierKey& k) const;
};

// The tiers' on-disk format; a change to it (or to KvLayout's byte layout) changes every
// namespace, so old blocks are simply never found again.
inline constexpr uint32_t kTierFormatVersion = 2;

// The namespace of a cache: XXH3 over the model's identity (model_id: what the engine derives
// from the checkpoint), the tier format, the block size, every group's kind, window / R and
// KvSpec (layers, heads, head_dim, dtype, per-layer dtypes), and group 0's FP8 scales (codes
// under other scales mean other values). Two caches share blocks only when all of it is equal.
uint64_t tier_namespace(std::string_view model_id, int32_t block_size,
                        std::span<const KvGroupSpec> groups, const KvStaticScales& scales);

// The namespace of group g's blocks in a cache of namespace ns: ns itself for group 0, another
// for each later group (whose blocks hold other layers or another precision of the same chain).
uint64_t group_namespace(uint64_t ns, int32_t group);

// The identity of a checkpoint directory for tier_namespace: XXH3-128 (32 hex digits) of
// config.json's bytes and, for every *.safetensors file there (by name), its name, size and
// first and last MiB -- the header with every tensor's shape and offset, and weights a fine-tune
// of the same shape changes. dummy_weights (--load-format dummy): config.json and a mark only.
// Files that cannot be read count as absent.
std::string checkpoint_identity(const std::string& model_dir, bool dummy_weights);

// XXH3-64 of a block's bytes: its checksum, computed once when the block comes down from the
// pool and carried with it to the host tier and to disk.
uint64_t tier_checksum(std::span<const std::byte> bytes);

}  // namespace strata::kv

#pragma once
// KV events as they go on the wire: vLLM's KVEventBatch in msgpack (docs/kv-events.md).
//
//   batch          [ts, [event, ...]]                        ts: float64, seconds since the epoch
//   BlockStored    ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//                   lora_id, medium]
//   BlockRemoved   ["BlockRemoved", block_hashes, medium]
//   AllBlocksCleared ["AllBlocksCleared"]
//
// These are msgspec's array_like, tagged structs: the class name first, then the fields in
// declaration order. A block hash is the first 8 bytes of Strata's SHA-256 chain hash read as a
// big-endian unsigned integer (msgpack's smallest integer form, uint64 for most); parent_block_hash
// is nil for a sequence's first block; lora_id is always nil (Strata serves no adapters); medium
// names where the blocks are (kv_medium_name: "GPU" the pool, "CPU" / "Disk" / "Remote" the
// tiers). A tier's BlockStored has vLLM's offloading form: parent nil and no token ids. Plain data
// and a pure function: thread-safe, no allocation but the output's.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_events.h"

namespace strata::kv {

// A block hash as the wire carries it: its first 8 bytes, big-endian.
uint64_t wire_block_hash(const BlockHash& hash);

// The pool's blocks of one chain cached together: block_hashes[i]'s parent is
// block_hashes[i - 1], the first's is parent_block_hash; token_ids holds every block's block_size
// tokens in order. A tier's blocks (medium not kDevice): no parent and no token ids.
struct WireBlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;
  std::vector<int32_t> token_ids;
  int32_t block_size = 0;
  KvMedium medium = KvMedium::kDevice;
};

struct WireBlockRemoved {
  std::vector<uint64_t> block_hashes;
  KvMedium medium = KvMedium::kDevice;
};

struct WireAllBlocksCleared {};

using WireKvEvent = std::variant<WireBlockStored, WireBlockRemoved, WireAllBlocksCleared>;

// One engine step's events, in the order the pool reported them.
struct WireKvEventBatch {
  double ts = 0.0;
  std::vector<WireKvEvent> events;

  // Appends a cached block; a block whose parent is the last event's newest block (a BlockStored
  // of the same block size) joins that event, as vLLM reports a request's new blocks in one.
  void add_stored(uint64_t hash, std::optional<uint64_t> parent, const int32_t* tokens,
                  int32_t block_size);
  // Appends a block that entered the tier of medium; consecutive ones of a tier share an event.
  void add_tier_stored(KvMedium medium, uint64_t hash, int32_t block_size);
  // Appends a dropped block; consecutive removals from one medium share one BlockRemoved.
  void add_removed(uint64_t hash, KvMedium medium = KvMedium::kDevice);
  void add_all_cleared() { events.emplace_back(WireAllBlocksCleared{}); }
  // Blocks named by the events (1 for AllBlocksCleared): what the metrics count.
  int64_t num_blocks() const;
};

// The batch in msgpack, each event with its medium's name.
std::string encode_kv_event_batch(const WireKvEventBatch& batch);

}  // namespace strata::kv

#pragma once
// KV events: what the block pool tells the outside world about its prefix cache, in the shape of
// vLLM's KV events (BlockStored / BlockRemoved / AllBlocksCleared). KvEventPublisher
// (kv_event_publisher.h) publishes them to routers over ZeroMQ (docs/kv-events.md).
//
// The pool calls the sink synchronously, from the scheduler thread, inside the operation that
// caused the event; a sink must not call back into the pool. Events of one pool arrive in the
// order they happened: a block's BlockStored always precedes its BlockRemoved. The KV tiers under
// the pool (kv_tiers.h) report their own blocks, by chain hash and medium, from the same thread.

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"

namespace strata::kv {

// Where a block lives: the engine's pool (the device), or one of the tiers under it.
enum class KvMedium { kDevice, kHost, kDisk, kRemote };
inline constexpr KvMedium kAllMedia[] = {KvMedium::kDevice, KvMedium::kHost, KvMedium::kDisk,
                                         KvMedium::kRemote};

// The medium as vLLM names it on the wire: "GPU" for the engine's pool (vLLM's block pool says
// GPU on every platform), "CPU" for host memory and "Disk" for local disk (its offloading
// connector's media); "Remote" for the shared pool on Redis, which vLLM has no name for.
constexpr std::string_view kv_medium_name(KvMedium m) {
  switch (m) {
    case KvMedium::kDevice:
      return "GPU";
    case KvMedium::kHost:
      return "CPU";
    case KvMedium::kDisk:
      return "Disk";
    case KvMedium::kRemote:
      return "Remote";
  }
  return "?";
}
// The medium a wire name names; nullopt for a name Strata does not know.
constexpr std::optional<KvMedium> kv_medium_from_name(std::string_view name) {
  for (const KvMedium m : kAllMedia) {
    if (kv_medium_name(m) == name) return m;
  }
  return std::nullopt;
}

// A full block entered the prefix cache.
struct BlockStoredEvent {
  BlockHash hash;
  std::optional<BlockHash> parent_hash;  // nullopt for a sequence's first block
  std::span<const int32_t> token_ids;    // the block's block_size tokens; valid during the call
  BlockId block_id;
};

// A cached block's content was dropped: evicted for reuse, or the cache was reset.
struct BlockRemovedEvent {
  BlockHash hash;
  BlockId block_id;
};

class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void on_block_stored(const BlockStoredEvent& event) = 0;
  virtual void on_block_removed(const BlockRemovedEvent& event) = 0;
  // Every cached block was dropped at once (BlockPool::reset_prefix_cache), with no
  // BlockRemoved of its own.
  virtual void on_all_blocks_cleared() = 0;
  // A block entered (stored) or left (removed) the tier of medium (not kDevice) under the pool.
  virtual void on_tier_block_stored(KvMedium medium, const BlockHash& hash) = 0;
  virtual void on_tier_block_removed(KvMedium medium, const BlockHash& hash) = 0;
};

// Keeps every event in memory, in order (tests, debugging). A stored event's token_ids point
// into stored_tokens[i], the recorder's copy.
class RecordingKvEventSink final : public KvEventSink {
 public:
  void on_block_stored(const BlockStoredEvent& event) override {
    stored_tokens.emplace_back(event.token_ids.begin(), event.token_ids.end());
    stored.push_back(event);
    stored.back().token_ids = stored_tokens.back();
  }
  void on_block_removed(const BlockRemovedEvent& event) override { removed.push_back(event); }
  void on_all_blocks_cleared() override { ++num_cleared; }
  void on_tier_block_stored(KvMedium medium, const BlockHash& hash) override {
    tier_stored.emplace_back(medium, hash);
  }
  void on_tier_block_removed(KvMedium medium, const BlockHash& hash) override {
    tier_removed.emplace_back(medium, hash);
  }

  std::vector<BlockStoredEvent> stored;
  std::vector<std::vector<int32_t>> stored_tokens;
  std::vector<BlockRemovedEvent> removed;
  int32_t num_cleared = 0;
  std::vector<std::pair<KvMedium, BlockHash>> tier_stored;
  std::vector<std::pair<KvMedium, BlockHash>> tier_removed;
};

}  // namespace strata::kv

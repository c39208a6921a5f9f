#pragma once
// KV events: what the block pool tells the outside world about its prefix cache, in the shape of
// vLLM's KV events (BlockStored / BlockRemoved) so that a later issue can publish them to routers
// (ZeroMQ + msgpack) without touching the pool.
//
// The pool calls the sink synchronously, from the scheduler thread, inside the operation that
// caused the event; a sink must not call back into the pool. Events of one pool arrive in the
// order they happened: a block's BlockStored always precedes its BlockRemoved.

#include <cstdint>
#include <optional>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"

namespace strata::kv {

// A full block entered the prefix cache.
struct BlockStoredEvent {
  BlockHash hash;
  std::optional<BlockHash> parent_hash;  // nullopt for a sequence's first block
  int32_t num_tokens = 0;                // tokens the block holds (= block_size)
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
};

// Keeps every event in memory, in order (tests, debugging, and a future publisher's buffer).
class RecordingKvEventSink final : public KvEventSink {
 public:
  void on_block_stored(const BlockStoredEvent& event) override { stored.push_back(event); }
  void on_block_removed(const BlockRemovedEvent& event) override { removed.push_back(event); }

  std::vector<BlockStoredEvent> stored;
  std::vector<BlockRemovedEvent> removed;
};

}  // namespace strata::kv

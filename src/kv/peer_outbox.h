#pragma once
// PeerOutbox: a prefill instance's blocks, kept for the decode instances that read them (the
// prefill side of disaggregation, docs/kv.md "Disaggregation"). KvTiers lends it every block it
// writes down to the host tier (BlockSink; the prefill role writes every cached block through);
// its thread codes each into a self-checking value (block_value.h) and keeps the value; a
// PeerServer's lookups copy the values asked for out of it:
//
//   put_borrowed   queued (at most kMaxQueued blocks; past that dropped and counted), from the
//                  scheduler thread
//   coder thread   codes the value from the host slot, hands the slot's tag back, keeps the value
//                  under its TierKey; past max_bytes the least recently put or read values go
//   lookup         each key's value copied out, or left empty (absent); a read counts as use.
//                  On the server's thread
//
// Values stay after they are read: a later request with the same prefix (on another decode
// instance, or after the decode instance's cache let the blocks go) reads them again. A decode
// instance asks for blocks that are still being computed, and asks again for those absent
// (PeerSource), so a lookup never waits.
//
// Thread-safe. Cost: one coding (a copy, for stored values) per block put, on the coder thread;
// one copy per block read, on the reader's.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/block_sink.h"
#include "kv/block_value.h"
#include "kv/tier_key.h"
#include "kv/value_buffer_pool.h"

namespace strata::kv {

struct PeerOutboxStats {
  int64_t num_put = 0;       // blocks coded and kept
  int64_t num_dropped = 0;   // puts dropped: the coder was kMaxQueued blocks behind
  int64_t num_evicted = 0;   // values that made room for newer ones
  int64_t num_served = 0;    // keys looked up and found
  int64_t bytes_served = 0;  // values copied out to peers
  int64_t bytes_held = 0;    // values kept now
};

class PeerOutbox final : public BlockSink {
 public:
  // Keeps at most max_bytes of values (at least one) of the blocks of format's namespace.
  PeerOutbox(BlockValueFormat format, int64_t max_bytes);
  ~PeerOutbox() override;  // what is queued is dropped (its tags handed back first)
  PeerOutbox(const PeerOutbox&) = delete;
  PeerOutbox& operator=(const PeerOutbox&) = delete;

  static constexpr size_t kMaxQueued = 256;

  bool put_borrowed(const BlockHash& hash, std::span<const int32_t> tokens,
                    std::span<const std::byte> bytes, uint64_t checksum, uint64_t tag) override;
  std::vector<uint64_t> take_released(bool wait = false) override;
  // Waits until every queued block is coded and kept (or dropped).
  void flush();

  // A PeerBlockLookup (peer_transport.h): values[i] = keys[i]'s value, or left empty.
  void lookup(std::span<const TierKey> keys, std::vector<std::string>& values);

  PeerOutboxStats stats() const;

 private:
  struct Put {
    BlockHash hash;
    std::span<const int32_t> tokens;
    std::span<const std::byte> bytes;
    uint64_t checksum = 0;
    uint64_t tag = 0;
  };
  struct Held {
    std::string value;
    std::list<BlockHash>::iterator use;  // its place in use_ (front: most recent)
  };
  void run();
  // Keeps value under hash as the most recent, making room past max_bytes_.
  void keep(const BlockHash& hash, std::string value);

  const BlockValueFormat format_;
  const int64_t max_bytes_;
  mutable std::mutex mu_;  // guards what follows
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Put> queue_;
  bool coding_ = false;
  LentTags lent_;
  std::unordered_map<BlockHash, Held> held_;
  std::list<BlockHash> use_;
  ValueBufferPool spare_;  // evicted values' buffers, for the next to code into
  PeerOutboxStats stats_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata::kv

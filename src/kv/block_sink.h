#pragma once
// BlockSink: where KvTiers hands the blocks it writes down to the host tier, to be shared beyond
// this instance -- Redis (RemoteTier) or the decode instances reading from this prefill
// instance (PeerOutbox). A block is lent, not copied: the sink codes its value from the host
// slot's bytes on a thread of its own and hands the slot's tag back when done, and KvTiers
// keeps the slot pinned until then.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "kv/block_hash.h"

namespace strata::kv {

class BlockSink {
 public:
  virtual ~BlockSink() = default;
  // Takes (hash, tokens, bytes) without a copy: they must stay as they are until
  // take_released() hands tag back. False when dropped (the sink is behind): nothing was
  // borrowed. From any thread.
  virtual bool put_borrowed(const BlockHash& hash, std::span<const int32_t> tokens,
                            std::span<const std::byte> bytes, uint64_t checksum, uint64_t tag) = 0;
  // The tags of borrowed blocks the sink is done with, since the last call; with wait, first
  // waits until there is one (an empty result then means none is borrowed).
  virtual std::vector<uint64_t> take_released(bool wait = false) = 0;
};

// A sink's lent blocks: counted as they are lent, their tags collected as they are given back,
// for take_released. Guarded by the sink's own mutex: every call holds it.
class LentTags {
 public:
  void lend() { ++lent_; }
  void give_back(uint64_t tag) {
    released_.push_back(tag);
    cv_.notify_all();
  }
  // take_released's body (lock holds the sink's mutex).
  std::vector<uint64_t> take(std::unique_lock<std::mutex>& lock, bool wait) {
    if (wait) cv_.wait(lock, [&] { return !released_.empty() || lent_ == 0; });
    std::vector<uint64_t> out;
    out.swap(released_);
    lent_ -= static_cast<int64_t>(out.size());
    return out;
  }

 private:
  std::vector<uint64_t> released_;
  int64_t lent_ = 0;  // lent and not taken back yet
  std::condition_variable cv_;
};

}  // namespace strata::kv

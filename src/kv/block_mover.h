#pragma once
// BlockMover: how whole blocks move between the KV pool, wherever it lives, and a buffer in host
// memory with the pool's layout (the swap space today; the host tier later). The CPU backend's
// pool is host memory (HostBlockMover: one memcpy per block); the GPU backend's mover copies
// between device memory and the host buffer (src/model/cuda). A block is one contiguous span of
// block_bytes in both (kv_layout.h), so a block moves in one piece.
//
// Called from a copy thread (SwapSpace's), never concurrently with itself; the caller guarantees
// that no one writes the source blocks or touches the destination blocks until the call returns.

#include <cstdint>
#include <span>

#include "kv/host_kv_buffer.h"
#include "kv/kv_cache_manager.h"

namespace strata::kv {

// One block-sized slot of a peer's region, mapped in this process (PeerRegionView::data() plus
// the slot's offset: host memory for shared memory, a device pointer for CUDA IPC), and the pool
// block it is copied into.
struct RegionCopy {
  const std::byte* src = nullptr;
  BlockId dst;
};

class BlockMover {
 public:
  virtual ~BlockMover() = default;

  // Blocks in the pool (the null block included): valid pool ids are 1 .. num_pool_blocks() - 1.
  virtual int32_t num_pool_blocks() const = 0;
  // Called once, before any copy, with the host buffer the copies will use (a GPU mover pins
  // it), and detach() once after the last, before the buffer is freed.
  virtual void attach(HostKvBuffer& host) = 0;
  virtual void detach(HostKvBuffer& host) = 0;
  // pool block pairs[i].src -> host block pairs[i].dst, for every i; returns when done.
  virtual void to_host(std::span<const BlockCopy> pairs, HostKvBuffer& host) = 0;
  // host block pairs[i].src -> pool block pairs[i].dst, for every i; returns when done.
  virtual void from_host(std::span<const BlockCopy> pairs, const HostKvBuffer& host) = 0;
  // pool block pairs[i].src -> block-sized slot pairs[i].dst of a peer region (PeerRegion::slots,
  // peer_region.h: host memory for the CPU mover, device memory for the GPU one, whose copy
  // engines move it without a trip through the host); returns when the copies completed.
  virtual void to_region(std::span<const BlockCopy> pairs, std::byte* slots) = 0;

  // The same copies, started and left running (a GPU mover's copy stream overlaps the step's
  // work); returns a ticket for them. Neither side's blocks may be touched until
  // copies_done(ticket). The default copies at once and returns kDoneTicket.
  static constexpr uint64_t kDoneTicket = 0;
  virtual uint64_t start_from_host(std::span<const BlockCopy> pairs, const HostKvBuffer& host) {
    from_host(pairs, host);
    return kDoneTicket;
  }
  // Region slots -> pool blocks, straight (a decode instance's blocks out of the prefill
  // instance's region, docs/kv.md "One machine"): memcpy for the CPU mover, device to device by
  // the copy engines for the GPU one, no host buffer between. Started as start_from_host is (the
  // same tickets, in the same order); the slots must stay mapped until copies_done(ticket).
  virtual uint64_t start_from_region(std::span<const RegionCopy> copies) = 0;
  // The pool block's bytes when the pool is host memory (the CPU mover's), else empty: a block
  // copied out of a region is checksummed there on the CPU (on the GPU its slot's generation
  // alone vouches for it).
  virtual std::span<const std::byte> host_block(BlockId /*block*/) const { return {}; }
  // Whether the copies of ticket, and of every ticket before it, have finished.
  virtual bool copies_done(uint64_t /*ticket*/) { return true; }
  // Returns when they have.
  virtual void wait_copies(uint64_t /*ticket*/) {}
};

// The CPU backend's mover: the pool is a HostKvBuffer.
class HostBlockMover final : public BlockMover {
 public:
  explicit HostBlockMover(HostKvBuffer& pool) : pool_(pool) {}

  int32_t num_pool_blocks() const override { return pool_.num_blocks(); }
  void attach(HostKvBuffer& /*host: already host memory*/) override {}
  void detach(HostKvBuffer& /*host*/) override {}
  void to_host(std::span<const BlockCopy> pairs, HostKvBuffer& host) override;
  void from_host(std::span<const BlockCopy> pairs, const HostKvBuffer& host) override;
  void to_region(std::span<const BlockCopy> pairs, std::byte* slots) override;
  uint64_t start_from_region(std::span<const RegionCopy> copies) override;  // at once
  std::span<const std::byte> host_block(BlockId block) const override;

 private:
  HostKvBuffer& pool_;
};

}  // namespace strata::kv

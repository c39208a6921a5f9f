#pragma once
// CudaBlockMover: the GPU backend's BlockMover (kv/block_mover.h) -- whole blocks between the
// device KV pool and a host buffer of the same layout (swap preemption, the KV tiers). attach()
// pins and maps the host buffer. Blocks of kDmaBlockBytes or more then move by the copy engines:
// one cudaMemcpyAsync per run of blocks consecutive on both sides, which a large model's blocks
// (2 MiB for Llama-3.1-8B) keep at PCIe rate without taking SMs; smaller blocks move in one
// launch of the block-copy kernel reading or writing host memory over PCIe
// (src/kernels/cuda/block_copy.h), where thousands of small copies would cost more in calls
// than in bytes. If pinning fails the copies fall back to one cudaMemcpy per block.
//
// Owns its own stream (copies overlap the step's work on the model's stream) and a small pinned
// staging buffer for the block pairs. start_from_host leaves its copies running on that stream;
// the synchronous copies queue behind them. Called from one copy thread; CUDA failures there abort
// (STRATA_CHECK): a half-done swap has no recovery.

#include <cstddef>
#include <deque>
#include <cstdint>
#include <memory>
#include <span>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/event.h"
#include "kernels/cuda/stream.h"
#include "kv/block_mover.h"

namespace strata::model {

class CudaBlockMover final : public kv::BlockMover {
 public:
  // pool: the device pool of num_blocks blocks of block_bytes each.
  CudaBlockMover(void* pool, int32_t num_blocks, int64_t block_bytes);
  ~CudaBlockMover() override;

  // Blocks of at least this many bytes move by cudaMemcpyAsync per run, smaller ones by the kernel.
  static constexpr int64_t kDmaBlockBytes = int64_t{256} << 10;

  int32_t num_pool_blocks() const override { return num_blocks_; }
  void attach(kv::HostKvBuffer& host) override;
  void detach(kv::HostKvBuffer& host) override;
  void to_host(std::span<const kv::BlockCopy> pairs, kv::HostKvBuffer& host) override;
  void from_host(std::span<const kv::BlockCopy> pairs, const kv::HostKvBuffer& host) override;
  // Device to device (a CUDA IPC region, cuda_peer_region.h) by the copy engines, on the
  // mover's stream, which is synchronized before it returns.
  void to_region(std::span<const kv::BlockCopy> pairs, std::byte* slots) override;
  // By the copy engines on the mover's stream, an event recorded after them; blocks smaller than
  // kDmaBlockBytes, or an unpinned buffer, copy at once (kDoneTicket).
  uint64_t start_from_host(std::span<const kv::BlockCopy> pairs,
                           const kv::HostKvBuffer& host) override;
  // Device to device out of a CUDA IPC region this process opened (kv::PeerRegionView::data()),
  // one cudaMemcpyAsync per block on the mover's stream, an event recorded after them: the
  // decode instance's blocks skip its host tier.
  uint64_t start_from_region(std::span<const kv::RegionCopy> copies) override;
  bool copies_done(uint64_t ticket) override;
  void wait_copies(uint64_t ticket) override;

 private:
  // Copies pairs (src, dst block ids) from src_pool to dst_pool (device-accessible pointers).
  void copy(std::span<const kv::BlockCopy> pairs, const void* src_pool, void* dst_pool);
  // The same by the copy engines, a cudaMemcpyAsync per run of consecutive pairs, left running.
  void start_runs(std::span<const kv::BlockCopy> pairs, const void* src_pool, void* dst_pool);
  // A ticket for the copies queued on the stream so far (an event recorded after them).
  uint64_t record_ticket();

  void* pool_;
  int32_t num_blocks_;
  int64_t block_bytes_;
  cuda::Stream stream_;
  void* mapped_host_ = nullptr;  // the attached buffer's device pointer, when pinned
  cuda::PinnedArray<int32_t> staging_;
  cuda::DeviceBuffer device_pairs_;
  size_t capacity_pairs_ = 0;
  // Started copies not yet seen finished, oldest first: each ticket's event.
  struct Started {
    uint64_t ticket;
    cuda::Event done;
  };
  std::deque<Started> started_;
  uint64_t last_ticket_ = kDoneTicket;
  uint64_t finished_ = kDoneTicket;  // every ticket up to this one has finished
};

}  // namespace strata::model

#pragma once
// SwapSpace: the first host tier. A sequence preempted by swap leaves its computed blocks here and
// gets them back later, instead of recomputing them. Its blocks have the pool's layout
// (KvLayout), so a block moves in one memcpy of block_bytes each way.
//
// Copies run on one copy thread, in submission order, so the scheduler never waits for a
// swap-in: it starts the copy, keeps the sequence out of the batch until Transfer::ready(), and
// steps on. A swap-out must be complete before the pool blocks it read are written again: the
// engine waits for the step's swap-outs (Transfer::wait) before its copy-on-write copies and its
// forward pass.
//
// Owns the swap buffer, a BlockPool as its free list (block 0 is the null block, never used), and
// the copy thread; borrows the mover (it must outlive the space). Not thread-safe apart from
// Transfer::ready/wait: the scheduler thread owns it. Cost: block_bytes moved per block, on the
// copy thread.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "core/ids.h"
#include "kv/block_mover.h"
#include "kv/block_pool.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_layout.h"

namespace strata::kv {

class SwapSpace {
 public:
  // A batch of block copies on the copy thread.
  struct Transfer {
    std::vector<BlockId> swap_blocks;  // in the order of the pool blocks copied
    std::shared_future<void> done;

    bool ready() const {
      return done.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
    void wait() const { done.wait(); }
  };

  // num_blocks usable swap blocks (>= 0; 0 = every swap-out fails), moved by mover.
  SwapSpace(const KvLayout& layout, int32_t num_blocks, BlockMover& mover);
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  int32_t num_blocks() const { return free_list_.num_blocks() - 1; }
  int32_t num_free_blocks() const { return free_list_.num_free_blocks(); }

  // Takes one swap block per pool block and starts copying pool_blocks (none the null block) out
  // of pool into them. nullopt, changing nothing, when too few swap blocks are free.
  std::optional<Transfer> swap_out(std::span<const BlockId> pool_blocks);
  // Starts copying swap_blocks back into pool_blocks (same length; allocated by the caller, not
  // read or written by anyone until the transfer is ready). The swap blocks stay taken: free them
  // once the transfer is ready.
  Transfer swap_in(std::span<const BlockId> swap_blocks, std::span<const BlockId> pool_blocks);
  void free(std::span<const BlockId> swap_blocks);

 private:
  Transfer submit(std::vector<BlockId> swap_blocks, std::function<void()> copy);
  void run();

  BlockMover& mover_;
  HostKvBuffer buffer_;
  BlockPool free_list_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace strata::kv

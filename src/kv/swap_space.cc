#include "kv/swap_space.h"

#include <utility>

#include "core/check.h"

namespace strata::kv {

SwapSpace::SwapSpace(const KvLayout& layout, int32_t num_blocks, BlockMover& mover)
    : mover_(mover), buffer_(layout, num_blocks + 1), free_list_(num_blocks + 1) {
  STRATA_CHECK(num_blocks >= 0, "swap space: negative block count");
  mover_.attach(buffer_);
  worker_ = std::thread([this] { run(); });
}

SwapSpace::~SwapSpace() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  worker_.join();  // runs what is queued first: no transfer is left unfinished
  mover_.detach(buffer_);
}

void SwapSpace::run() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

SwapSpace::Transfer SwapSpace::submit(std::vector<BlockId> swap_blocks,
                                      std::function<void()> copy) {
  std::packaged_task<void()> task(std::move(copy));
  Transfer t{std::move(swap_blocks), task.get_future().share()};
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return t;
}

std::optional<SwapSpace::Transfer> SwapSpace::swap_out(std::span<const BlockId> pool_blocks) {
  std::optional<std::vector<BlockId>> swap =
      free_list_.allocate(static_cast<int32_t>(pool_blocks.size()));
  if (!swap) return std::nullopt;
  std::vector<BlockCopy> pairs;
  for (size_t i = 0; i < pool_blocks.size(); ++i) {
    const BlockId b = pool_blocks[i];
    STRATA_CHECK(b != kNullBlock && b.value < mover_.num_pool_blocks(), "swap_out: bad pool block");
    pairs.push_back(BlockCopy{b, (*swap)[i]});
  }
  return submit(std::move(*swap), [this, pairs = std::move(pairs)] {
    mover_.to_host(pairs, buffer_);
  });
}

SwapSpace::Transfer SwapSpace::swap_in(std::span<const BlockId> swap_blocks,
                                       std::span<const BlockId> pool_blocks) {
  STRATA_CHECK(swap_blocks.size() == pool_blocks.size(), "swap_in: block counts differ");
  std::vector<BlockCopy> pairs;
  for (size_t i = 0; i < pool_blocks.size(); ++i) {
    const BlockId b = pool_blocks[i];
    STRATA_CHECK(b != kNullBlock && b.value < mover_.num_pool_blocks(), "swap_in: bad pool block");
    pairs.push_back(BlockCopy{swap_blocks[i], b});
  }
  std::vector<BlockId> keep(swap_blocks.begin(), swap_blocks.end());
  return submit(std::move(keep), [this, pairs = std::move(pairs)] {
    mover_.from_host(pairs, buffer_);
  });
}

void SwapSpace::free(std::span<const BlockId> swap_blocks) { free_list_.free(swap_blocks); }

}  // namespace strata::kv

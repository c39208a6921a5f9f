#include "kv/swap_space.h"

#include <cstring>
#include <utility>

#include "core/check.h"

namespace strata::kv {

SwapSpace::SwapSpace(const KvLayout& layout, int32_t num_blocks)
    : block_bytes_(layout.block_bytes()),
      buffer_(layout, num_blocks + 1),
      free_list_(num_blocks + 1),
      worker_([this] { run(); }) {
  STRATA_CHECK(num_blocks >= 0, "swap space: negative block count");
}

SwapSpace::~SwapSpace() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  worker_.join();  // runs what is queued first: no transfer is left unfinished
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

std::optional<SwapSpace::Transfer> SwapSpace::swap_out(const HostKvBuffer& pool,
                                                       std::span<const BlockId> pool_blocks) {
  std::optional<std::vector<BlockId>> swap =
      free_list_.allocate(static_cast<int32_t>(pool_blocks.size()));
  if (!swap) return std::nullopt;
  std::vector<BlockId> src(pool_blocks.begin(), pool_blocks.end());
  for (const BlockId b : src) {
    STRATA_CHECK(b != kNullBlock && b.value < pool.num_blocks(), "swap_out: bad pool block");
  }
  const std::byte* from = pool.data();
  std::byte* to = buffer_.data();
  const int64_t bytes = block_bytes_;
  std::vector<BlockId> dst = *swap;
  return submit(std::move(*swap), [from, to, bytes, src = std::move(src), dst = std::move(dst)] {
    for (size_t i = 0; i < src.size(); ++i) {
      std::memcpy(to + dst[i].value * bytes, from + src[i].value * bytes,
                  static_cast<size_t>(bytes));
    }
  });
}

SwapSpace::Transfer SwapSpace::swap_in(HostKvBuffer& pool, std::span<const BlockId> swap_blocks,
                                       std::span<const BlockId> pool_blocks) {
  STRATA_CHECK(swap_blocks.size() == pool_blocks.size(), "swap_in: block counts differ");
  std::vector<BlockId> src(swap_blocks.begin(), swap_blocks.end());
  std::vector<BlockId> dst(pool_blocks.begin(), pool_blocks.end());
  for (const BlockId b : dst) {
    STRATA_CHECK(b != kNullBlock && b.value < pool.num_blocks(), "swap_in: bad pool block");
  }
  const std::byte* from = buffer_.data();
  std::byte* to = pool.data();
  const int64_t bytes = block_bytes_;
  std::vector<BlockId> keep = src;
  return submit(std::move(keep), [from, to, bytes, src = std::move(src), dst = std::move(dst)] {
    for (size_t i = 0; i < src.size(); ++i) {
      std::memcpy(to + dst[i].value * bytes, from + src[i].value * bytes,
                  static_cast<size_t>(bytes));
    }
  });
}

void SwapSpace::free(std::span<const BlockId> swap_blocks) { free_list_.free(swap_blocks); }

}  // namespace strata::kv

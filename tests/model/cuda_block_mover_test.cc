// CudaBlockMover with the swap space: blocks of a device pool go to host memory and come back
// byte for byte into other device blocks (the block-copy kernel over pinned, mapped memory), in
// the order the pairs name, and queued transfers finish before the space goes away. Skips
// without a GPU.

#include "model/cuda/cuda_block_mover.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kv/swap_space.h"

namespace strata::model {
namespace {

bool has_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

kv::KvLayout layout() { return kv::KvLayout(kv::KvSpec{2, 2, 64, DType::kBF16}, 16); }

std::vector<BlockId> ids(std::initializer_list<int32_t> v) {
  std::vector<BlockId> out;
  for (int32_t x : v) out.push_back(BlockId{x});
  return out;
}

class CudaBlockMoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
    bytes_ = layout().block_bytes();
    ASSERT_EQ(cudaMalloc(&pool_, static_cast<size_t>(kBlocks * bytes_)), cudaSuccess);
    std::vector<uint8_t> host(static_cast<size_t>(kBlocks * bytes_));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + i / bytes_);
    ASSERT_EQ(cudaMemcpy(pool_, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    original_ = host;
  }
  void TearDown() override {
    if (pool_ != nullptr) cudaFree(pool_);
  }
  std::vector<uint8_t> block(int32_t b) const {
    std::vector<uint8_t> out(static_cast<size_t>(bytes_));
    EXPECT_EQ(cudaMemcpy(out.data(), static_cast<uint8_t*>(pool_) + b * bytes_, out.size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }
  std::vector<uint8_t> original(int32_t b) const {
    return {original_.begin() + b * bytes_, original_.begin() + (b + 1) * bytes_};
  }

  static constexpr int32_t kBlocks = 8;
  void* pool_ = nullptr;
  int64_t bytes_ = 0;
  std::vector<uint8_t> original_;
};

TEST_F(CudaBlockMoverTest, BlocksComeBackByteForByteIntoOtherDeviceBlocks) {
  CudaBlockMover mover(pool_, kBlocks, bytes_);
  kv::SwapSpace swap(layout(), 4, mover);
  auto out = swap.swap_out(ids({2, 5}));
  ASSERT_TRUE(out.has_value());
  out->wait();
  ASSERT_EQ(cudaMemset(static_cast<uint8_t*>(pool_) + 2 * bytes_, 0, static_cast<size_t>(bytes_)),
            cudaSuccess);
  const kv::SwapSpace::Transfer in = swap.swap_in(out->swap_blocks, ids({7, 3}));
  in.wait();
  EXPECT_EQ(block(7), original(2));
  EXPECT_EQ(block(3), original(5));
  EXPECT_EQ(block(1), original(1));  // untouched
  swap.free(in.swap_blocks);
  EXPECT_EQ(swap.num_free_blocks(), 4);
}

TEST_F(CudaBlockMoverTest, QueuedTransfersFinishBeforeTheSpaceGoesAway) {
  CudaBlockMover mover(pool_, kBlocks, bytes_);
  std::vector<kv::SwapSpace::Transfer> transfers;
  {
    kv::SwapSpace swap(layout(), 7, mover);
    for (int32_t b = 1; b < kBlocks; ++b) transfers.push_back(*swap.swap_out(ids({b})));
  }
  for (const auto& t : transfers) EXPECT_TRUE(t.ready());
}

}  // namespace
}  // namespace strata::model

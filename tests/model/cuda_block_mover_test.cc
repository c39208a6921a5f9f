// CudaBlockMover with the swap space: blocks of a device pool go to host memory and come back
// byte for byte into other device blocks (the block-copy kernel over pinned, mapped memory), in
// the order the pairs name, and queued transfers finish before the space goes away; blocks of
// kDmaBlockBytes or more go by the copy engines, runs and scattered pairs alike, and copies left
// running (start_from_host, the KV tiers' promotions) finish in order and land byte for byte.
// Skips without a GPU.

#include "model/cuda/cuda_block_mover.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kv/host_kv_buffer.h"
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

// Blocks large enough for the copy engines: runs of consecutive pairs and scattered ones, down
// to a pinned host buffer and back into other device blocks.
TEST(CudaBlockMoverDmaTest, LargeBlocksMoveInRunsByteForByte) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const kv::KvLayout big(kv::KvSpec{4, 8, 128, DType::kBF16}, 16);
  const int64_t bytes = big.block_bytes();
  ASSERT_GE(bytes, CudaBlockMover::kDmaBlockBytes);
  constexpr int32_t kPool = 12;
  void* pool = nullptr;
  ASSERT_EQ(cudaMalloc(&pool, static_cast<size_t>(kPool * bytes)), cudaSuccess);
  std::vector<uint8_t> original(static_cast<size_t>(kPool * bytes));
  for (size_t i = 0; i < original.size(); ++i) {
    original[i] = static_cast<uint8_t>(i * 13 + i / static_cast<size_t>(bytes));
  }
  ASSERT_EQ(cudaMemcpy(pool, original.data(), original.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  {
    CudaBlockMover mover(pool, kPool, bytes);
    kv::HostKvBuffer host(big, 8);
    mover.attach(host);
    // Pool 1,2,3 -> host 0,1,2 (one run); pool 7 -> host 5, pool 5 -> host 4 (scattered).
    const std::vector<kv::BlockCopy> down = {{BlockId{1}, BlockId{0}},
                                             {BlockId{2}, BlockId{1}},
                                             {BlockId{3}, BlockId{2}},
                                             {BlockId{7}, BlockId{5}},
                                             {BlockId{5}, BlockId{4}}};
    mover.to_host(down, host);
    for (const kv::BlockCopy& c : down) {
      EXPECT_EQ(std::memcmp(host.data() + c.dst.value * bytes,
                            original.data() + c.src.value * bytes, static_cast<size_t>(bytes)),
                0)
          << "pool block " << c.src.value;
    }
    // Host 0,1,2 -> pool 8,9,10 (a run), host 5 -> pool 1, host 4 -> pool 11.
    const std::vector<kv::BlockCopy> up = {{BlockId{0}, BlockId{8}},
                                           {BlockId{1}, BlockId{9}},
                                           {BlockId{2}, BlockId{10}},
                                           {BlockId{5}, BlockId{1}},
                                           {BlockId{4}, BlockId{11}}};
    mover.from_host(up, host);
    mover.detach(host);
  }
  std::vector<uint8_t> got(original.size());
  ASSERT_EQ(cudaMemcpy(got.data(), pool, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(pool);
  const auto block = [&](const std::vector<uint8_t>& v, int32_t b) {
    return std::vector<uint8_t>(v.begin() + b * bytes, v.begin() + (b + 1) * bytes);
  };
  EXPECT_EQ(block(got, 8), block(original, 1));
  EXPECT_EQ(block(got, 9), block(original, 2));
  EXPECT_EQ(block(got, 10), block(original, 3));
  EXPECT_EQ(block(got, 1), block(original, 7));
  EXPECT_EQ(block(got, 11), block(original, 5));
  EXPECT_EQ(block(got, 6), block(original, 6)) << "untouched";
}

// Copies left running: each start a ticket, finished in the order started; the bytes land once
// they are. Small blocks (the kernel's) copy at once.
TEST(CudaBlockMoverDmaTest, StartedCopiesFinishInOrderAndLandByteForByte) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const kv::KvLayout big(kv::KvSpec{4, 8, 128, DType::kBF16}, 16);
  const int64_t bytes = big.block_bytes();
  constexpr int32_t kPool = 12;
  void* pool = nullptr;
  ASSERT_EQ(cudaMalloc(&pool, static_cast<size_t>(kPool * bytes)), cudaSuccess);
  ASSERT_EQ(cudaMemset(pool, 0, static_cast<size_t>(kPool * bytes)), cudaSuccess);
  kv::HostKvBuffer host(big, 8);
  for (int64_t i = 0; i < host.size_bytes(); ++i) {
    host.data()[i] = static_cast<std::byte>(i * 29 + i / bytes);
  }
  {
    CudaBlockMover mover(pool, kPool, bytes);
    mover.attach(host);
    const std::vector<kv::BlockCopy> run = {
        {BlockId{0}, BlockId{8}}, {BlockId{1}, BlockId{9}}, {BlockId{2}, BlockId{10}}};
    const std::vector<kv::BlockCopy> scattered = {{BlockId{5}, BlockId{1}},
                                                  {BlockId{4}, BlockId{11}}};
    const uint64_t first = mover.start_from_host(run, host);
    const uint64_t second = mover.start_from_host(scattered, host);
    EXPECT_NE(first, kv::BlockMover::kDoneTicket);
    EXPECT_GT(second, first);
    mover.wait_copies(second);
    EXPECT_TRUE(mover.copies_done(first)) << "finished in the order started";
    EXPECT_TRUE(mover.copies_done(second));
    std::vector<uint8_t> got(static_cast<size_t>(bytes));
    for (const auto& pairs : {run, scattered}) {
      for (const kv::BlockCopy& c : pairs) {
        ASSERT_EQ(cudaMemcpy(got.data(), static_cast<uint8_t*>(pool) + c.dst.value * bytes,
                             got.size(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_EQ(std::memcmp(got.data(), host.data() + c.src.value * bytes, got.size()), 0)
            << "host block " << c.src.value;
      }
    }
    // A copy started and then a synchronous one queue on one stream: both land.
    const uint64_t third =
        mover.start_from_host(std::vector<kv::BlockCopy>{{BlockId{6}, BlockId{2}}}, host);
    mover.from_host(std::vector<kv::BlockCopy>{{BlockId{7}, BlockId{3}}}, host);
    EXPECT_TRUE(mover.copies_done(third));
    mover.detach(host);
  }
  std::vector<uint8_t> got(static_cast<size_t>(bytes));
  ASSERT_EQ(cudaMemcpy(got.data(), static_cast<uint8_t*>(pool) + 2 * bytes, got.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), host.data() + 6 * bytes, got.size()), 0);
  cudaFree(pool);
}

TEST_F(CudaBlockMoverTest, SmallBlocksStartedCopyAtOnce) {
  CudaBlockMover mover(pool_, kBlocks, bytes_);
  kv::HostKvBuffer host(layout(), 4);
  mover.attach(host);
  mover.to_host(std::vector<kv::BlockCopy>{{BlockId{3}, BlockId{0}}}, host);
  EXPECT_EQ(mover.start_from_host(std::vector<kv::BlockCopy>{{BlockId{0}, BlockId{6}}}, host),
            kv::BlockMover::kDoneTicket);
  EXPECT_EQ(block(6), original(3));
  mover.detach(host);
}

}  // namespace
}  // namespace strata::model

// The CUDA IPC peer region (model/cuda/cuda_peer_region.h) between two processes on one GPU, as
// a prefill and a decode instance use it: a second process (this binary run again, as
// CudaPeerRegionOwner.Serve) makes a device pool and a region, copies pool blocks into slots with
// CudaBlockMover::to_region (device to device) and sends the handle over a pipe; this process
// opens the handle and copies each slot out byte for byte -- to the host (copy_out), and straight
// into a device pool of its own with its CudaBlockMover (start_from_region: device to device, as
// a decode instance promotes a block out of the region, no host slot between). A handle of
// another region id, a garbage handle and the owner's own handle in its own process are refused,
// never a crash. Skips without a GPU.

#include "model/cuda/cuda_peer_region.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kv/peer_frames.h"
#include "model/cuda/cuda_block_mover.h"

namespace strata::model {
namespace {

constexpr int64_t kBlockBytes = 300 << 10;  // above kDmaBlockBytes: the copy engines' path
constexpr int32_t kPoolBlocks = 5;
constexpr int32_t kSlots = 4;
constexpr int kToParentFd = 3;
constexpr int kFromParentFd = 4;
constexpr const char* kOwnerEnv = "STRATA_TEST_PEER_REGION_OWNER";
// Pool block -> slot pairs the owner copies.
const std::vector<kv::BlockCopy> kCopies = {
    {BlockId{1}, BlockId{0}}, {BlockId{2}, BlockId{1}}, {BlockId{4}, BlockId{3}}};

bool has_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

uint8_t pattern(int32_t block, int64_t i) { return static_cast<uint8_t>(block * 131 + i * 7); }

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 60000) <= 0) return false;
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The second process: run by CudaPeerRegionTest only (skipped otherwise).
TEST(CudaPeerRegionOwner, Serve) {
  if (std::getenv(kOwnerEnv) == nullptr) GTEST_SKIP() << "CudaPeerRegionTest's second process";
  void* pool = nullptr;
  ASSERT_EQ(cudaMalloc(&pool, kPoolBlocks * kBlockBytes), cudaSuccess);
  std::vector<uint8_t> host(static_cast<size_t>(kPoolBlocks * kBlockBytes));
  for (int32_t b = 0; b < kPoolBlocks; ++b) {
    for (int64_t i = 0; i < kBlockBytes; ++i) host[b * kBlockBytes + i] = pattern(b, i);
  }
  ASSERT_EQ(cudaMemcpy(pool, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  Result<std::unique_ptr<kv::PeerRegion>> region =
      create_cuda_peer_region(kv::kPeerRegionHeaderBytes + kSlots * kBlockBytes);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  CudaBlockMover mover(pool, kPoolBlocks, kBlockBytes);
  mover.to_region(kCopies, (*region)->slots());
  // Its own handle does not open in its own process (the reader is always another one).
  EXPECT_FALSE(
      open_cuda_peer_region((*region)->handle(), (*region)->region_id(), (*region)->size_bytes())
          .ok());
  const auto handle_bytes = static_cast<uint32_t>((*region)->handle().size());
  const uint64_t id = (*region)->region_id();
  const int64_t size = (*region)->size_bytes();
  ASSERT_TRUE(write_all(kToParentFd, &handle_bytes, sizeof(handle_bytes)));
  ASSERT_TRUE(write_all(kToParentFd, (*region)->handle().data(), handle_bytes));
  ASSERT_TRUE(write_all(kToParentFd, &id, sizeof(id)));
  ASSERT_TRUE(write_all(kToParentFd, &size, sizeof(size)));
  char done = 0;
  EXPECT_TRUE(read_all(kFromParentFd, &done, 1));  // the reader has copied and closed
  region->reset();
  cudaFree(pool);
}

// The reader's side of the decode instance's promotion: the owner's slots straight into pool
// blocks of this process's own device pool (slot kCopies[i].dst -> pool block kPoolBlocks - 1 -
// i), in two started batches whose tickets finish in order; then the pool, read back, holds each
// slot's pool block's pattern. A GPU pool has no host bytes to checksum (host_block is empty).
void copy_into_pool(const kv::PeerRegionView& view, int64_t block_bytes) {
  void* pool = nullptr;
  ASSERT_EQ(cudaMalloc(&pool, kPoolBlocks * block_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(pool, 0, kPoolBlocks * block_bytes), cudaSuccess);
  {
    CudaBlockMover mover(pool, kPoolBlocks, block_bytes);
    EXPECT_TRUE(mover.host_block(BlockId{1}).empty());
    std::vector<kv::RegionCopy> copies;
    for (size_t i = 0; i < kCopies.size(); ++i) {
      copies.push_back(kv::RegionCopy{
          view.data() + kv::kPeerRegionHeaderBytes + kCopies[i].dst.value * block_bytes,
          BlockId{kPoolBlocks - 1 - static_cast<int32_t>(i)}});
    }
    const uint64_t first = mover.start_from_region(std::span(copies).first(1));
    const uint64_t rest = mover.start_from_region(std::span(copies).subspan(1));
    EXPECT_NE(first, kv::BlockMover::kDoneTicket);
    EXPECT_GT(rest, first);
    EXPECT_EQ(mover.start_from_region({}), kv::BlockMover::kDoneTicket);
    mover.wait_copies(rest);
    EXPECT_TRUE(mover.copies_done(first));
    EXPECT_TRUE(mover.copies_done(rest));
  }
  std::vector<uint8_t> host(static_cast<size_t>(kPoolBlocks * block_bytes));
  ASSERT_EQ(cudaMemcpy(host.data(), pool, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(pool);
  for (size_t i = 0; i < kCopies.size(); ++i) {
    const int64_t b = kPoolBlocks - 1 - static_cast<int64_t>(i);
    int64_t wrong = 0;
    for (int64_t k = 0; k < block_bytes; ++k) {
      wrong += host[static_cast<size_t>(b * block_bytes + k)] != pattern(kCopies[i].src.value, k);
    }
    EXPECT_EQ(wrong, 0) << "pool block " << b << " from slot " << kCopies[i].dst.value;
  }
  int64_t touched = 0;  // pool block 0 (the null block) is no copy's destination
  for (int64_t k = 0; k < block_bytes; ++k) touched += host[static_cast<size_t>(k)] != 0;
  EXPECT_EQ(touched, 0);
}

TEST(CudaPeerRegionTest, ASecondProcessCopiesTheBlocksOutOfTheRegion) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  int to_parent[2], from_parent[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(from_parent), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // exec at once: this process may hold a CUDA context, which fork does not copy
    ::dup2(to_parent[1], kToParentFd);
    ::dup2(from_parent[0], kFromParentFd);
    ::setenv(kOwnerEnv, "1", 1);
    ::execl("/proc/self/exe", "cuda_peer_region_owner", "--gtest_filter=CudaPeerRegionOwner.Serve",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(to_parent[1]);
  ::close(from_parent[0]);
  uint32_t handle_bytes = 0;
  uint64_t id = 0;
  int64_t size = 0;
  std::string handle;
  bool got = read_all(to_parent[0], &handle_bytes, sizeof(handle_bytes)) && handle_bytes <= 256;
  if (got) {
    handle.resize(handle_bytes);
    got = read_all(to_parent[0], handle.data(), handle_bytes) &&
          read_all(to_parent[0], &id, sizeof(id)) && read_all(to_parent[0], &size, sizeof(size));
  }
  if (got) {
    EXPECT_EQ(size, kv::kPeerRegionHeaderBytes + kSlots * kBlockBytes);
    EXPECT_FALSE(open_cuda_peer_region(handle, id + 1, size).ok()) << "another region's id";
    EXPECT_FALSE(open_cuda_peer_region(std::string(64, '\x7f'), id, size).ok()) << "garbage";
    EXPECT_FALSE(open_cuda_peer_region(handle.substr(1), id, size).ok()) << "a short handle";
    Result<std::unique_ptr<kv::PeerRegionView>> view = open_cuda_peer_region(handle, id, size);
    EXPECT_TRUE(view.ok()) << view.status().to_string();
    if (view.ok()) {
      std::vector<std::byte> out(static_cast<size_t>(kBlockBytes));
      for (const kv::BlockCopy& c : kCopies) {
        ASSERT_TRUE(
            (*view)->copy_out(kv::kPeerRegionHeaderBytes + c.dst.value * kBlockBytes, out).ok());
        int64_t wrong = 0;
        for (int64_t i = 0; i < kBlockBytes; ++i) {
          wrong += static_cast<uint8_t>(out[static_cast<size_t>(i)]) != pattern(c.src.value, i);
        }
        EXPECT_EQ(wrong, 0) << "slot " << c.dst.value << " from pool block " << c.src.value;
      }
      EXPECT_FALSE((*view)->copy_out(size - 8, out).ok()) << "past the region's end";
      copy_into_pool(**view, kBlockBytes);
      view->reset();
    }
  }
  const char done = 1;
  (void)write_all(from_parent[1], &done, 1);
  ::close(from_parent[1]);
  ::close(to_parent[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(got) << "the owner process sent no handle";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the owner process failed";
}

}  // namespace
}  // namespace strata::model

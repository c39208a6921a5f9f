// Block copy (copy-on-write inside one pool, swap between two pools): whole blocks of a real
// multi-layer pool layout move, every other byte stays.

#include "kernels/cuda/block_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/dispatch.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

class BlockCopyTest : public CudaTest {};

void run_copy(int32_t block_size, int32_t num_pairs, bool same_pool, uint64_t seed) {
  SCOPED_TRACE("bs" + std::to_string(block_size) + " pairs " + std::to_string(num_pairs) +
               (same_pool ? " same pool" : " two pools"));
  std::mt19937_64 rng(seed);
  const kv::KvLayout layout(kv::KvSpec{3, 2, 128, DType::kBF16}, block_size);
  const int64_t block_bytes = layout.block_bytes();
  const int32_t num_blocks = 2 * num_pairs + 3;
  std::vector<uint8_t> src(static_cast<size_t>(block_bytes * num_blocks));
  std::vector<uint8_t> dst(src.size());
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : src) b = static_cast<uint8_t>(byte(rng));
  for (auto& b : dst) b = static_cast<uint8_t>(byte(rng));
  // Sources and destinations disjoint, as the contract asks.
  std::vector<int32_t> ids(num_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> pairs;
  for (int32_t i = 0; i < num_pairs; ++i) {
    pairs.push_back(ids[2 * i]);
    pairs.push_back(ids[2 * i + 1]);
  }
  DeviceBuffer d_src = upload(src);
  DeviceBuffer d_dst = upload(dst);
  DeviceBuffer d_pairs = upload(pairs);
  BlockCopyParams p;
  p.src_pool = d_src.data();
  p.dst_pool = same_pool ? d_src.data() : d_dst.data();
  p.block_pairs = d_pairs.as<int32_t>();
  p.num_pairs = num_pairs;
  p.block_bytes = block_bytes;
  STRATA_ASSERT_OK(block_copy(p, nullptr));
  sync_device();

  std::vector<uint8_t>& want = same_pool ? src : dst;
  const std::vector<uint8_t> src_before = src;
  for (int32_t i = 0; i < num_pairs; ++i) {
    std::memcpy(&want[static_cast<size_t>(pairs[2 * i + 1] * block_bytes)],
                &src_before[static_cast<size_t>(pairs[2 * i] * block_bytes)],
                static_cast<size_t>(block_bytes));
  }
  const auto got = download<uint8_t>(same_pool ? d_src : d_dst, want.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) mismatches += got[i] != want[i];
  EXPECT_EQ(mismatches, 0);
  if (!same_pool) {
    const auto src_after = download<uint8_t>(d_src, src.size());
    EXPECT_TRUE(src_after == src_before) << "the source pool was modified";
  }
}

TEST_F(BlockCopyTest, CopyOnWriteInsideOnePool) {
  uint64_t seed = 1;
  for (int32_t bs : kKvBlockSizes) {
    for (int32_t pairs : {1, 17}) run_copy(bs, pairs, true, seed++);
  }
}

TEST_F(BlockCopyTest, SwapBetweenTwoPools) {
  run_copy(16, 97, false, 5);
  run_copy(128, 3, false, 6);
}

TEST(BlockCopyDispatchTest, RejectsUnalignedBlockBytes) {
  BlockCopyParams p;
  p.num_pairs = 1;
  p.block_bytes = 24;
  EXPECT_EQ(block_copy(p, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cuda::testing

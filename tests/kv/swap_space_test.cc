// SwapSpace: blocks go out and come back byte for byte on the copy thread, the free list is
// transactional (a swap-out that does not fit changes nothing), and transfers queued before the
// space is destroyed still complete.

#include "kv/swap_space.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::ids;

KvLayout small_layout() { return KvLayout(KvSpec{2, 2, 8, DType::kF32}, 4); }

void fill_block(HostKvBuffer& kv, int32_t block, std::byte value) {
  std::memset(kv.data() + block * kv.layout().block_bytes(), static_cast<int>(value),
              static_cast<size_t>(kv.layout().block_bytes()));
}

bool block_is(const HostKvBuffer& kv, int32_t block, std::byte value) {
  const std::byte* p = kv.data() + block * kv.layout().block_bytes();
  for (int64_t i = 0; i < kv.layout().block_bytes(); ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

TEST(SwapSpaceTest, BlocksComeBackByteForByteIntoOtherPoolBlocks) {
  HostKvBuffer pool(small_layout(), 8);
  HostBlockMover mover(pool);
  SwapSpace swap(small_layout(), 4, mover);
  fill_block(pool, 2, std::byte{0x11});
  fill_block(pool, 5, std::byte{0x22});
  auto out = swap.swap_out(ids({2, 5}));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(swap.num_free_blocks(), 2);
  out->wait();
  fill_block(pool, 2, std::byte{0});  // the pool blocks are reused
  fill_block(pool, 5, std::byte{0});
  const SwapSpace::Transfer in = swap.swap_in(out->swap_blocks, ids({7, 3}));
  in.wait();
  EXPECT_TRUE(in.ready());
  EXPECT_TRUE(block_is(pool, 7, std::byte{0x11}));
  EXPECT_TRUE(block_is(pool, 3, std::byte{0x22}));
  swap.free(in.swap_blocks);
  EXPECT_EQ(swap.num_free_blocks(), 4);
}

TEST(SwapSpaceTest, ASwapOutThatDoesNotFitChangesNothing) {
  HostKvBuffer pool(small_layout(), 8);
  HostBlockMover mover(pool);
  SwapSpace swap(small_layout(), 2, mover);
  EXPECT_FALSE(swap.swap_out(ids({1, 2, 3})).has_value());
  EXPECT_EQ(swap.num_free_blocks(), 2);
  SwapSpace none(small_layout(), 0, mover);
  EXPECT_FALSE(none.swap_out(ids({1})).has_value());
}

TEST(SwapSpaceTest, QueuedTransfersCompleteBeforeTheSpaceIsDestroyed) {
  HostKvBuffer pool(small_layout(), 64);
  HostBlockMover mover(pool);
  std::vector<SwapSpace::Transfer> transfers;
  {
    SwapSpace swap(small_layout(), 63, mover);
    for (int32_t b = 1; b < 64; ++b) {
      fill_block(pool, b, std::byte{static_cast<unsigned char>(b)});
      transfers.push_back(*swap.swap_out(ids({b})));
    }
  }
  for (const auto& t : transfers) EXPECT_TRUE(t.ready());
}

}  // namespace
}  // namespace strata::kv

#include "core/paged_kv.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace strata {
namespace {

// The example drawn in paged_kv.h, plus an empty sequence and a one-token sequence.
struct ExampleLayout {
  std::vector<int32_t> indptr = {0, 3, 5, 5, 6};
  std::vector<int32_t> indices = {7, 2, 9, 4, 1, 3};
  std::vector<int32_t> last_page_len = {5, 16, 0, 1};

  PagedKvLayout view() const {
    PagedKvLayout l;
    l.kv_indptr = indptr.data();
    l.kv_indices = indices.data();
    l.kv_last_page_len = last_page_len.data();
    l.num_seqs = 4;
    l.block_size = 16;
    return l;
  }
};

TEST(PagedKvLayoutTest, NumBlocksPerSequence) {
  const ExampleLayout ex;
  const PagedKvLayout l = ex.view();
  EXPECT_EQ(l.num_blocks(0), 3);
  EXPECT_EQ(l.num_blocks(1), 2);
  EXPECT_EQ(l.num_blocks(2), 0);
  EXPECT_EQ(l.num_blocks(3), 1);
}

TEST(PagedKvLayoutTest, KvLenIsFullBlocksPlusLastPage) {
  const ExampleLayout ex;
  const PagedKvLayout l = ex.view();
  EXPECT_EQ(l.kv_len(0), 37);  // 16 + 16 + 5
  EXPECT_EQ(l.kv_len(1), 32);  // exactly on a block boundary: last page full
  EXPECT_EQ(l.kv_len(2), 0);   // no blocks: last page length unused
  EXPECT_EQ(l.kv_len(3), 1);
}

TEST(PagedKvLayoutTest, EmptySequenceHasZeroKvLenWhateverItsLastPageSays) {
  ExampleLayout ex;
  ex.last_page_len[2] = 11;  // garbage in the unused entry
  EXPECT_EQ(ex.view().kv_len(2), 0);
}

TEST(PagedKvLayoutTest, BlockOfFollowsTheDrawnExample) {
  const ExampleLayout ex;
  const PagedKvLayout l = ex.view();
  EXPECT_EQ(l.block_of(0, 0), 7);
  EXPECT_EQ(l.block_of(0, 15), 7);
  EXPECT_EQ(l.block_of(0, 16), 2);
  EXPECT_EQ(l.block_of(0, 31), 2);
  EXPECT_EQ(l.block_of(0, 32), 9);
  EXPECT_EQ(l.block_of(0, 36), 9);
  EXPECT_EQ(l.block_of(1, 0), 4);
  EXPECT_EQ(l.block_of(1, 31), 1);
  EXPECT_EQ(l.block_of(3, 0), 3);
}

TEST(PagedKvLayoutTest, BlockOfEveryPositionMatchesTheBlockList) {
  const ExampleLayout ex;
  const PagedKvLayout l = ex.view();
  const std::vector<std::vector<int32_t>> blocks = {{7, 2, 9}, {4, 1}, {}, {3}};
  for (int32_t s = 0; s < l.num_seqs; ++s) {
    for (int32_t pos = 0; pos < l.kv_len(s); ++pos) {
      ASSERT_EQ(l.block_of(s, pos), blocks[static_cast<size_t>(s)][static_cast<size_t>(pos / 16)])
          << "seq " << s << " pos " << pos;
    }
  }
}

PagedKvCacheView make_view(void* k, void* v) {
  // 3 layers x (K, V) x 2 heads x 16 tokens x 8 dims per block, this layer's K/V in block 0.
  PagedKvCacheView view;
  view.k_data = k;
  view.v_data = v;
  view.num_kv_heads = 2;
  view.head_dim = 8;
  view.block_size = 16;
  view.token_stride = 8;
  view.head_stride = 16 * 8;
  view.block_stride = 3 * 2 * 2 * 16 * 8;
  view.dtype = DType::kF32;
  return view;
}

TEST(PagedKvCacheViewTest, OffsetIsBlockHeadTokenStrides) {
  const PagedKvCacheView view = make_view(nullptr, nullptr);
  EXPECT_EQ(view.offset(0, 0, 0), 0);
  EXPECT_EQ(view.offset(0, 0, 1), 8);
  EXPECT_EQ(view.offset(0, 1, 0), 128);
  EXPECT_EQ(view.offset(1, 0, 0), 1536);
  EXPECT_EQ(view.offset(5, 1, 15), 5 * 1536 + 128 + 15 * 8);
}

TEST(PagedKvCacheViewTest, SlotOffsetSplitsSlotIntoBlockAndToken) {
  const PagedKvCacheView view = make_view(nullptr, nullptr);
  for (int64_t slot = 0; slot < 16 * 20; ++slot) {
    for (int32_t h = 0; h < 2; ++h) {
      ASSERT_EQ(view.slot_offset(slot, h), (slot / 16) * 1536 + h * 128 + (slot % 16) * 8)
          << "slot " << slot;
    }
  }
}

TEST(PagedKvCacheViewTest, OffsetsDoNotOverflowInt32) {
  PagedKvCacheView view = make_view(nullptr, nullptr);
  view.block_stride = int64_t{1} << 20;  // e.g. a large model's block, in elements
  EXPECT_EQ(view.offset(100000, 1, 3), int64_t{100000} * (int64_t{1} << 20) + 128 + 24);
  EXPECT_EQ(view.slot_offset(int64_t{100000} * 16 + 3, 1),
            int64_t{100000} * (int64_t{1} << 20) + 128 + 24);
}

TEST(PagedKvCacheViewTest, KAndVPointersAreOffsetFromTheirBases) {
  std::vector<float> pool(4 * 1536, 0.0f);
  float* k = pool.data();
  float* v = pool.data() + 2 * 16 * 8;  // V follows this layer's K in the block
  const PagedKvCacheView view = make_view(k, v);
  EXPECT_EQ(view.k<float>(2, 1, 3), k + 2 * 1536 + 128 + 24);
  EXPECT_EQ(view.v<float>(2, 1, 3), v + 2 * 1536 + 128 + 24);
  *view.k<float>(3, 0, 15) = 1.5f;
  EXPECT_EQ(pool[3 * 1536 + 15 * 8], 1.5f);
}

}  // namespace
}  // namespace strata

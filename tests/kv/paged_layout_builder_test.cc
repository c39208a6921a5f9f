#include "kv/paged_layout_builder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/paged_kv.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "pool_testing.h"

namespace strata::kv {
namespace {

using test_util::set_free_queue_order;
using V32 = std::vector<int32_t>;
using V64 = std::vector<int64_t>;

// [begin, end) as slots.
V64 slots(int64_t begin, int64_t end) {
  V64 out;
  for (int64_t s = begin; s < end; ++s) out.push_back(s);
  return out;
}

V64 concat(std::initializer_list<V64> parts) {
  V64 out;
  for (const V64& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

BlockTable table_with(BlockPool& pool, int32_t block_size, int32_t num_tokens) {
  BlockTable table(block_size);
  EXPECT_TRUE(table.append_slots(pool, num_tokens));
  pool.check_invariants();
  return table;
}

TEST(PagedLayoutBuilderTest, EmptyBatchHasASingleZeroIndptr) {
  const PagedLayoutBuilder builder(16);
  EXPECT_EQ(builder.num_seqs(), 0);
  EXPECT_EQ(builder.kv_indptr(), (V32{0}));
  EXPECT_TRUE(builder.kv_indices().empty());
  EXPECT_TRUE(builder.kv_last_page_len().empty());
  EXPECT_TRUE(builder.slot_mapping().empty());
  const PagedKvLayout layout = builder.layout();
  EXPECT_EQ(layout.num_seqs, 0);
  EXPECT_EQ(layout.block_size, 16);
  EXPECT_EQ(layout.kv_indptr[0], 0);
}

TEST(PagedLayoutBuilderTest, HandBuiltBatchGivesExactArrays) {
  BlockPool pool(12);
  set_free_queue_order(pool, {7, 2, 9, 4, 1, 3, 10});
  const BlockTable prefill = table_with(pool, 16, 37);   // blocks 7, 2, 9
  const BlockTable empty = table_with(pool, 16, 0);      // no blocks
  const BlockTable boundary = table_with(pool, 16, 32);  // blocks 4, 1: exactly two full blocks
  const BlockTable fresh = table_with(pool, 16, 17);     // blocks 3, 10: one token in the second

  PagedLayoutBuilder builder(16);
  builder.add_sequence(prefill, 37, 37);  // whole prompt
  builder.add_sequence(empty, 0, 0);
  builder.add_sequence(boundary, 32, 1);  // decode of the last slot of a block
  builder.add_sequence(fresh, 17, 1);     // decode of the first slot of a block

  EXPECT_EQ(builder.num_seqs(), 4);
  EXPECT_EQ(builder.kv_indptr(), (V32{0, 3, 3, 5, 7}));
  EXPECT_EQ(builder.kv_indices(), (V32{7, 2, 9, 4, 1, 3, 10}));
  EXPECT_EQ(builder.kv_last_page_len(), (V32{5, 0, 16, 1}));
  EXPECT_EQ(builder.slot_mapping(), concat({slots(7 * 16, 8 * 16),
                                            slots(2 * 16, 3 * 16),
                                            slots(9 * 16, 9 * 16 + 5),
                                            {1 * 16 + 15},
                                            {10 * 16}}));

  const PagedKvLayout layout = builder.layout();
  EXPECT_EQ(layout.kv_len(0), 37);
  EXPECT_EQ(layout.kv_len(1), 0);
  EXPECT_EQ(layout.kv_len(2), 32);
  EXPECT_EQ(layout.kv_len(3), 17);
}

TEST(PagedLayoutBuilderTest, KvLenOnABlockBoundaryHasAFullLastPage) {
  for (const int32_t bs : {8, 16, 32, 64, 128}) {
    BlockPool pool(8);
    const BlockTable table = table_with(pool, bs, 3 * bs);
    PagedLayoutBuilder builder(bs);
    builder.add_sequence(table, 2 * bs, 0);
    builder.add_sequence(table, 3 * bs, 0);
    builder.add_sequence(table, bs, 0);
    EXPECT_EQ(builder.kv_indptr(), (V32{0, 2, 5, 6})) << bs;
    EXPECT_EQ(builder.kv_indices(), (V32{1, 2, 1, 2, 3, 1})) << bs;
    EXPECT_EQ(builder.kv_last_page_len(), (V32{bs, bs, bs})) << bs;
    EXPECT_TRUE(builder.slot_mapping().empty());
  }
}

TEST(PagedLayoutBuilderTest, OneTokenPastABoundaryStartsANewPage) {
  BlockPool pool(8);
  const BlockTable table = table_with(pool, 8, 17);
  PagedLayoutBuilder builder(8);
  builder.add_sequence(table, 17, 1);
  EXPECT_EQ(builder.kv_indptr(), (V32{0, 3}));
  EXPECT_EQ(builder.kv_indices(), (V32{1, 2, 3}));
  EXPECT_EQ(builder.kv_last_page_len(), (V32{1}));
  EXPECT_EQ(builder.slot_mapping(), (V64{3 * 8}));
}

TEST(PagedLayoutBuilderTest, OnlyBlocksHoldingTheFirstKvLenTokensAreVisible) {
  // A chunked prefill: the table already has slots for the whole prompt, the step sees 20 tokens
  // and writes the 4 of them that are new.
  BlockPool pool(8);
  set_free_queue_order(pool, {7, 2, 5});
  const BlockTable table = table_with(pool, 16, 37);  // blocks 7, 2, 5
  PagedLayoutBuilder builder(16);
  builder.add_sequence(table, 20, 4);
  EXPECT_EQ(builder.kv_indptr(), (V32{0, 2}));
  EXPECT_EQ(builder.kv_indices(), (V32{7, 2}));
  EXPECT_EQ(builder.kv_last_page_len(), (V32{4}));
  EXPECT_EQ(builder.slot_mapping(), slots(2 * 16, 2 * 16 + 4));
}

TEST(PagedLayoutBuilderTest, PrefillChunkSpanningBlocksMapsEachToken) {
  BlockPool pool(8);
  set_free_queue_order(pool, {6, 1, 4});
  const BlockTable table = table_with(pool, 16, 37);  // blocks 6, 1, 4
  PagedLayoutBuilder builder(16);
  builder.add_sequence(table, 37, 23);  // positions 14 .. 36
  EXPECT_EQ(builder.kv_indices(), (V32{6, 1, 4}));
  EXPECT_EQ(builder.kv_last_page_len(), (V32{5}));
  EXPECT_EQ(builder.slot_mapping(),
            concat({slots(6 * 16 + 14, 7 * 16), slots(1 * 16, 2 * 16), slots(4 * 16, 4 * 16 + 5)}));
}

TEST(PagedLayoutBuilderTest, DecodeBatchMapsOneSlotPerSequence) {
  BlockPool pool(16);
  set_free_queue_order(pool, {11, 3, 8, 14, 2, 6});
  const BlockTable a = table_with(pool, 8, 9);   // blocks 11, 3
  const BlockTable b = table_with(pool, 8, 1);   // block 8
  const BlockTable c = table_with(pool, 8, 24);  // blocks 14, 2, 6
  PagedLayoutBuilder builder(8);
  builder.add_sequence(a, 9, 1);
  builder.add_sequence(b, 1, 1);
  builder.add_sequence(c, 24, 1);
  EXPECT_EQ(builder.kv_indptr(), (V32{0, 2, 3, 6}));
  EXPECT_EQ(builder.kv_indices(), (V32{11, 3, 8, 14, 2, 6}));
  EXPECT_EQ(builder.kv_last_page_len(), (V32{1, 1, 8}));
  EXPECT_EQ(builder.slot_mapping(), (V64{3 * 8, 8 * 8, 6 * 8 + 7}));
}

TEST(PagedLayoutBuilderTest, LayoutPointsAtTheBuilderArrays) {
  BlockPool pool(8);
  const BlockTable table = table_with(pool, 16, 40);
  PagedLayoutBuilder builder(16);
  builder.add_sequence(table, 40, 40);
  builder.add_sequence(table, 3, 0);
  const PagedKvLayout layout = builder.layout();
  EXPECT_EQ(layout.kv_indptr, builder.kv_indptr().data());
  EXPECT_EQ(layout.kv_indices, builder.kv_indices().data());
  EXPECT_EQ(layout.kv_last_page_len, builder.kv_last_page_len().data());
  EXPECT_EQ(layout.num_seqs, 2);
  EXPECT_EQ(layout.block_size, 16);
}

TEST(PagedLayoutBuilderTest, ClearStartsANewBatch) {
  BlockPool pool(8);
  const BlockTable t1 = table_with(pool, 16, 20);
  const BlockTable t2 = table_with(pool, 16, 5);
  PagedLayoutBuilder reused(16);
  reused.add_sequence(t1, 20, 20);
  reused.add_sequence(t2, 5, 5);
  reused.clear();
  EXPECT_EQ(reused.num_seqs(), 0);
  EXPECT_EQ(reused.kv_indptr(), (V32{0}));
  EXPECT_TRUE(reused.kv_indices().empty());
  EXPECT_TRUE(reused.kv_last_page_len().empty());
  EXPECT_TRUE(reused.slot_mapping().empty());

  reused.add_sequence(t2, 5, 1);
  PagedLayoutBuilder fresh(16);
  fresh.add_sequence(t2, 5, 1);
  EXPECT_EQ(reused.kv_indptr(), fresh.kv_indptr());
  EXPECT_EQ(reused.kv_indices(), fresh.kv_indices());
  EXPECT_EQ(reused.kv_last_page_len(), fresh.kv_last_page_len());
  EXPECT_EQ(reused.slot_mapping(), fresh.slot_mapping());
}

TEST(PagedLayoutBuilderTest, RandomBatchesAgreeWithTheirBlockTables) {
  // Whatever the batch, the layout's accessors address exactly the slots the tables give.
  std::mt19937 rng(99);
  for (const int32_t bs : {8, 16, 32, 64, 128}) {
    BlockPool pool(400);
    for (int round = 0; round < 20; ++round) {
      std::vector<BlockTable> tables;
      std::vector<int32_t> kv_lens;
      std::vector<int32_t> new_counts;
      PagedLayoutBuilder builder(bs);
      const int num_seqs = std::uniform_int_distribution<int>(1, 8)(rng);
      for (int s = 0; s < num_seqs; ++s) {
        const int32_t tokens = std::uniform_int_distribution<int32_t>(0, 5 * bs)(rng);
        tables.push_back(table_with(pool, bs, tokens));
        kv_lens.push_back(std::uniform_int_distribution<int32_t>(0, tokens)(rng));
        new_counts.push_back(std::uniform_int_distribution<int32_t>(0, kv_lens.back())(rng));
      }
      for (int s = 0; s < num_seqs; ++s) {
        builder.add_sequence(tables[static_cast<size_t>(s)], kv_lens[static_cast<size_t>(s)],
                             new_counts[static_cast<size_t>(s)]);
      }
      const PagedKvLayout layout = builder.layout();
      ASSERT_EQ(layout.num_seqs, num_seqs);
      size_t slot_idx = 0;
      for (int32_t s = 0; s < num_seqs; ++s) {
        const BlockTable& table = tables[static_cast<size_t>(s)];
        const int32_t kv_len = kv_lens[static_cast<size_t>(s)];
        ASSERT_EQ(layout.kv_len(s), kv_len);
        ASSERT_EQ(layout.num_blocks(s), (kv_len + bs - 1) / bs);
        if (kv_len > 0) {
          ASSERT_GE(layout.kv_last_page_len[s], 1);
          ASSERT_LE(layout.kv_last_page_len[s], bs);
        }
        for (int32_t pos = 0; pos < kv_len; ++pos) {
          ASSERT_EQ(static_cast<int64_t>(layout.block_of(s, pos)) * bs + pos % bs, table.slot(pos));
        }
        for (int32_t pos = kv_len - new_counts[static_cast<size_t>(s)]; pos < kv_len; ++pos) {
          ASSERT_EQ(builder.slot_mapping()[slot_idx++], table.slot(pos));
        }
      }
      ASSERT_EQ(slot_idx, builder.slot_mapping().size());
      for (BlockTable& t : tables) t.release(pool);
      pool.check_invariants();
      ASSERT_EQ(pool.num_used_blocks(), 0);
    }
  }
}

TEST(PagedLayoutBuilderDeathTest, ContractViolationsAbort) {
  BlockPool pool(8);
  const BlockTable table = table_with(pool, 16, 10);
  const BlockTable other_size = table_with(pool, 8, 10);
  PagedLayoutBuilder builder(16);
  EXPECT_DEATH(builder.add_sequence(other_size, 10, 1), "block table of another block size");
  EXPECT_DEATH(builder.add_sequence(table, 11, 1), "kv_len beyond the table's slots");
  EXPECT_DEATH(builder.add_sequence(table, -1, 0), "kv_len beyond the table's slots");
  EXPECT_DEATH(builder.add_sequence(table, 4, 5), "new tokens beyond kv_len");
  EXPECT_DEATH(builder.add_sequence(table, 4, -1), "new tokens beyond kv_len");
  EXPECT_DEATH(PagedLayoutBuilder bad(0), "block_size must be positive");
}

}  // namespace
}  // namespace strata::kv

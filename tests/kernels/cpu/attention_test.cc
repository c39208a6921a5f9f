#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "paged_batch.h"

namespace strata::cpu {
namespace {

using test_util::AttnConfig;
using test_util::bit_equal;
using test_util::PagedBatch;
using test_util::SeqSpec;
using test_util::Tolerance;

ThreadPool& pool_of(int num_threads) {
  static ThreadPool pool1(1);
  static ThreadPool pool2(2);
  static ThreadPool pool3(3);
  return num_threads == 1 ? pool1 : (num_threads == 2 ? pool2 : pool3);
}

struct HeadConfig {
  int32_t num_q_heads;
  int32_t num_kv_heads;
  const char* name;
};
constexpr HeadConfig kHeadConfigs[] = {{8, 2, "GQA"}, {4, 1, "MQA"}, {2, 2, "MHA"}};

// A ragged batch over kv_len: a prefill chunk on top of a cached prefix, a decode, and a whole
// prefill (capped so the 2049 sweeps stay fast; LongWholePrefill covers the uncapped case).
std::vector<SeqSpec> ragged_batch(int32_t kv_len) {
  const int32_t chunk = std::max(1, std::min(7, kv_len - 1));
  const int32_t whole = kv_len <= 97 ? kv_len : 9;
  return {{chunk, kv_len, 11}, {1, kv_len, 12}, {whole, whole, 13}};
}

std::string case_name(const AttnConfig& cfg, const HeadConfig& heads) {
  return std::string(heads.name) + " q_heads=" + std::to_string(cfg.num_q_heads) +
         " kv_heads=" + std::to_string(cfg.num_kv_heads) +
         " head_dim=" + std::to_string(cfg.head_dim) + " block=" + std::to_string(cfg.block_size) +
         " dtype=" + std::string(dtype_name(cfg.dtype)) +
         " window=" + std::to_string(cfg.sliding_window);
}

// ---- the sweep: block size x kv length x KV dtype, each over GQA / MQA / MHA and head dims -----

using SweepParam = std::tuple<int32_t, int32_t, DType>;

class PagedAttentionSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(PagedAttentionSweep, MatchesFloat64Reference) {
  const auto [block_size, kv_len, dtype] = GetParam();
  // Long cases use a small head_dim so the whole sweep stays CI-fast.
  const std::vector<int32_t> head_dims =
      kv_len > 97 ? std::vector<int32_t>{32} : std::vector<int32_t>{64, 128};
  for (const HeadConfig& heads : kHeadConfigs) {
    for (int32_t head_dim : head_dims) {
      AttnConfig cfg;
      cfg.num_q_heads = heads.num_q_heads;
      cfg.num_kv_heads = heads.num_kv_heads;
      cfg.head_dim = head_dim;
      cfg.block_size = block_size;
      cfg.dtype = dtype;
      // I4 reads its newest R blocks from the newest-blocks group: R = 1 and 3.
      for (const int32_t r :
           dtype == DType::kI4 ? std::vector<int32_t>{1, 3} : std::vector<int32_t>{1}) {
        cfg.newest_blocks = r;
        PagedBatch batch(cfg, ragged_batch(kv_len),
                         /*shuffle_seed=*/static_cast<uint32_t>(kv_len));
        ASSERT_TRUE(paged_attention(batch.params(), pool_of(2)).ok());
        EXPECT_LT(batch.max_row_error(), Tolerance::kAttention)
            << case_name(cfg, heads) << " R=" << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizeLengthDType, PagedAttentionSweep,
                         ::testing::Combine(::testing::Values(8, 16, 32, 64, 128),
                                            ::testing::Values(1, 17, 97, 2049),
                                            ::testing::ValuesIn(kAttentionKvDTypes)),
                         [](const ::testing::TestParamInfo<SweepParam>& info) {
                           return "block" + std::to_string(std::get<0>(info.param)) + "_len" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param)));
                         });

// ---- sliding windows -------------------------------------------------------------------------

TEST(PagedAttentionTest, SlidingWindowMatchesReference) {
  for (int32_t block_size : {8, 32}) {
    for (int32_t window : {1, 5, 16, 96, 97, 98, 1000}) {
      AttnConfig cfg;
      cfg.block_size = block_size;
      cfg.sliding_window = window;
      cfg.dtype = block_size == 8 ? DType::kBF16 : DType::kF32;
      PagedBatch batch(cfg, ragged_batch(97), /*shuffle_seed=*/5);
      ASSERT_TRUE(paged_attention(batch.params(), pool_of(3)).ok());
      EXPECT_LT(batch.max_row_error(), Tolerance::kAttention) << case_name(cfg, kHeadConfigs[0]);
    }
  }
}

TEST(PagedAttentionTest, WindowShorterThanContextChangesTheResult) {
  // Proves the window test can fail: a window that cuts the context must change the output, and a
  // window covering the whole context must not.
  const std::vector<SeqSpec> seqs = {{1, 97, 3}};
  AttnConfig cfg;
  PagedBatch full(cfg, seqs, 1);
  cfg.sliding_window = 16;
  PagedBatch windowed(cfg, seqs, 1);
  cfg.sliding_window = 97;
  PagedBatch covering(cfg, seqs, 1);
  for (PagedBatch* b : {&full, &windowed, &covering}) {
    ASSERT_TRUE(paged_attention(b->params(), pool_of(1)).ok());
  }
  const int64_t n = full.row_elems();
  EXPECT_FALSE(bit_equal(full.out_row(0), windowed.out_row(0), n));
  EXPECT_TRUE(bit_equal(full.out_row(0), covering.out_row(0), n));
}

TEST(PagedAttentionTest, LongWholePrefillMatchesReference) {
  for (int32_t window : {0, 256}) {
    AttnConfig cfg;
    cfg.num_q_heads = 2;
    cfg.num_kv_heads = 1;
    cfg.head_dim = 32;
    cfg.block_size = 16;
    cfg.sliding_window = window;
    PagedBatch batch(cfg, {{2049, 2049, 21}}, /*shuffle_seed=*/9);
    ASSERT_TRUE(paged_attention(batch.params(), pool_of(2)).ok());
    EXPECT_LT(batch.max_row_error(), Tolerance::kAttention) << "window " << window;
  }
}

TEST(PagedAttentionTest, HeadDimNotMultipleOfLanes) {
  for (int32_t head_dim : {4, 20, 72}) {
    AttnConfig cfg;
    cfg.head_dim = head_dim;
    cfg.dtype = DType::kF16;
    PagedBatch batch(cfg, ragged_batch(40), /*shuffle_seed=*/3);
    ASSERT_TRUE(paged_attention(batch.params(), pool_of(2)).ok());
    EXPECT_LT(batch.max_row_error(), Tolerance::kAttention) << "head_dim " << head_dim;
  }
}

TEST(PagedAttentionTest, SequencesWithoutQueryRowsAreSkipped) {
  // A sequence with cached K/V but no rows this step, and an empty one, between two others.
  AttnConfig cfg;
  PagedBatch batch(cfg, {{3, 20, 1}, {0, 30, 2}, {0, 0, 3}, {1, 9, 4}}, /*shuffle_seed=*/4);
  ASSERT_TRUE(paged_attention(batch.params(), pool_of(2)).ok());
  EXPECT_LT(batch.max_row_error(), Tolerance::kAttention);
}

// ---- determinism: batch, thread count and chunking invariance ----------------------------------

TEST(PagedAttentionTest, RowsBitIdenticalAloneOrInBatchAtAnyThreadCount) {
  for (DType dtype : kAttentionKvDTypes) {
    AttnConfig cfg;
    cfg.dtype = dtype;
    const SeqSpec target = {5, 50, 7};
    PagedBatch alone(cfg, {target}, /*shuffle_seed=*/1);
    ASSERT_TRUE(paged_attention(alone.params(), pool_of(1)).ok());
    for (int threads : {1, 2, 3}) {
      PagedBatch batch(cfg, {{1, 30, 1}, {20, 20, 2}, target, {4, 64, 3}},
                       /*shuffle_seed=*/static_cast<uint32_t>(10 + threads));
      ASSERT_TRUE(paged_attention(batch.params(), pool_of(threads)).ok());
      const int32_t begin = batch.q_begin(2);
      EXPECT_TRUE(
          bit_equal(alone.out_row(0), batch.out_row(begin), target.q_len * alone.row_elems()))
          << dtype_name(dtype) << " threads " << threads;
    }
  }
}

TEST(PagedAttentionTest, ChunkedPrefillBitIdenticalToWholePrefill) {
  AttnConfig cfg;
  cfg.block_size = 8;
  const int32_t len = 97;
  PagedBatch whole(cfg, {{len, len, 5}}, /*shuffle_seed=*/1);
  ASSERT_TRUE(paged_attention(whole.params(), pool_of(2)).ok());
  const std::vector<std::pair<int32_t, int32_t>> chunks = {{0, 40}, {40, 41}, {41, 80}, {80, 97}};
  for (const auto& [begin, end] : chunks) {
    // The chunk shares its batch with an unrelated decode, and runs on another thread count.
    PagedBatch chunk(cfg, {{1, 33, 6}, {end - begin, end, 5}},
                     /*shuffle_seed=*/static_cast<uint32_t>(end));
    ASSERT_TRUE(paged_attention(chunk.params(), pool_of(3)).ok());
    EXPECT_TRUE(bit_equal(whole.out_row(begin), chunk.out_row(chunk.q_begin(1)),
                          (end - begin) * whole.row_elems()))
        << "chunk [" << begin << ", " << end << ")";
  }
}

// ---- INT4 (KIVI): the newest-blocks window, chunking, errors
// ----------------------------------------

TEST(PagedAttentionInt4Test, SlidingWindowMatchesReference) {
  for (int32_t block_size : {8, 32}) {
    for (int32_t r : {1, 3}) {
      for (int32_t window : {1, 5, 16, 96, 97, 1000}) {
        AttnConfig cfg;
        cfg.dtype = DType::kI4;
        cfg.block_size = block_size;
        cfg.newest_blocks = r;
        cfg.sliding_window = window;
        PagedBatch batch(cfg, ragged_batch(97), /*shuffle_seed=*/5);
        ASSERT_TRUE(paged_attention(batch.params(), pool_of(3)).ok());
        EXPECT_LT(batch.max_row_error(), Tolerance::kAttention)
            << case_name(cfg, kHeadConfigs[0]) << " R=" << r;
      }
    }
  }
}

TEST(PagedAttentionInt4Test, LongWholePrefillAndChunkOnCachedPrefixMatchReference) {
  AttnConfig cfg;
  cfg.dtype = DType::kI4;
  cfg.num_q_heads = 4;
  cfg.num_kv_heads = 1;
  cfg.head_dim = 32;
  for (int32_t r : {1, 3}) {
    cfg.newest_blocks = r;
    PagedBatch batch(cfg, {{2049, 2049, 21}, {37, 2049, 22}, {1, 2049, 23}}, /*shuffle_seed=*/9);
    ASSERT_TRUE(paged_attention(batch.params(), pool_of(2)).ok());
    EXPECT_LT(batch.max_row_error(), Tolerance::kAttention) << "R " << r;
  }
}

TEST(PagedAttentionInt4Test, TheNewestBlocksWindowDecidesWhatIsRead) {
  // The reference is only meaningful if int4 and full precision differ visibly: the same decode
  // with R = 1 and R = 3 must differ, and R covering every block must equal an F32 cache.
  const std::vector<SeqSpec> seqs = {{1, 97, 3}};
  AttnConfig cfg;
  cfg.block_size = 16;
  PagedBatch f32(cfg, seqs, 1);
  cfg.dtype = DType::kI4;
  PagedBatch r1(cfg, seqs, 1);
  cfg.newest_blocks = 3;
  PagedBatch r3(cfg, seqs, 1);
  cfg.newest_blocks = 7;  // blocks 0..6: all of them
  PagedBatch all(cfg, seqs, 1);
  for (PagedBatch* b : {&f32, &r1, &r3, &all}) {
    ASSERT_TRUE(paged_attention(b->params(), pool_of(1)).ok());
  }
  const int64_t n = f32.row_elems();
  EXPECT_FALSE(bit_equal(r1.out_row(0), r3.out_row(0), n));
  EXPECT_FALSE(bit_equal(r3.out_row(0), f32.out_row(0), n));
  EXPECT_TRUE(bit_equal(all.out_row(0), f32.out_row(0), n));
  EXPECT_LT(r1.max_row_error(), Tolerance::kAttention);
  EXPECT_LT(r3.max_row_error(), Tolerance::kAttention);
}

TEST(PagedAttentionInt4Test, ChunkedPrefillBitIdenticalToWholePrefill) {
  for (int32_t r : {1, 3}) {
    AttnConfig cfg;
    cfg.dtype = DType::kI4;
    cfg.block_size = 8;
    cfg.newest_blocks = r;
    const int32_t len = 97;
    PagedBatch whole(cfg, {{len, len, 5}}, /*shuffle_seed=*/1);
    ASSERT_TRUE(paged_attention(whole.params(), pool_of(2)).ok());
    // Chunk boundaries inside blocks and on them; each chunk's newest-blocks entries start as late
    // as allowed, so earlier blocks exist only as int4 codes.
    const std::vector<std::pair<int32_t, int32_t>> chunks = {
        {0, 40}, {40, 41}, {41, 80}, {80, 96}, {96, 97}};
    for (const auto& [begin, end] : chunks) {
      PagedBatch chunk(cfg, {{1, 33, 6}, {end - begin, end, 5}},
                       /*shuffle_seed=*/static_cast<uint32_t>(end));
      ASSERT_TRUE(paged_attention(chunk.params(), pool_of(3)).ok());
      EXPECT_TRUE(bit_equal(whole.out_row(begin), chunk.out_row(chunk.q_begin(1)),
                            (end - begin) * whole.row_elems()))
          << "R " << r << " chunk [" << begin << ", " << end << ")";
    }
  }
}

TEST(PagedAttentionInt4Test, NewestBlocksEntriesBeforeTheWindowAreNotRead) {
  // Extra newest-blocks entries (blocks the engine has not freed yet) change nothing.
  AttnConfig cfg;
  cfg.dtype = DType::kI4;
  cfg.newest_blocks = 2;
  PagedBatch tight(cfg, ragged_batch(97), /*shuffle_seed=*/4);
  cfg.extra_newest_blocks = 3;
  PagedBatch loose(cfg, ragged_batch(97), /*shuffle_seed=*/4);
  ASSERT_TRUE(paged_attention(tight.params(), pool_of(2)).ok());
  ASSERT_TRUE(paged_attention(loose.params(), pool_of(1)).ok());
  EXPECT_TRUE(
      bit_equal(tight.out().data(), loose.out().data(), static_cast<int64_t>(tight.out().size())));
}

TEST(PagedAttentionInt4Test, RejectsMissingOrShortNewestBlocksLayout) {
  AttnConfig cfg;
  cfg.dtype = DType::kI4;
  cfg.block_size = 8;
  cfg.newest_blocks = 2;
  // Sequence 0: a chunk of 4 rows at positions 36..39 (block 4): full precision from block 3.
  PagedBatch batch(cfg, {{4, 40, 1}, {1, 5, 2}}, /*shuffle_seed=*/1);
  const auto code_of = [&](auto mutate) {
    AttentionParams p = batch.params();
    mutate(p);
    return paged_attention(p, pool_of(1)).code();
  };
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.layout.kv_indptr = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.layout.kv_indices = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.layout.first_block = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.blocks = 0; }), kInvalid);
  // R = 3 needs block 2 too, which the tables do not hold.
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.blocks = 3; }), kInvalid);
  const std::vector<int32_t> late_first = {4, 0};
  const std::vector<int32_t> late_indptr = {0, 1, 2};
  EXPECT_EQ(code_of([&](AttentionParams& p) {
              p.newest.layout.first_block = late_first.data();
              p.newest.layout.kv_indptr = late_indptr.data();
            }),
            kInvalid);
  const std::vector<int32_t> short_indptr = {0, 1, 2};  // sequence 0 lists 1 of its 2 blocks
  EXPECT_EQ(code_of([&](AttentionParams& p) { p.newest.layout.kv_indptr = short_indptr.data(); }),
            kInvalid);
  const std::vector<int32_t> negative = {-1, -1, -1};
  EXPECT_EQ(code_of([&](AttentionParams& p) { p.newest.layout.kv_indices = negative.data(); }),
            kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.cache.dtype = DType::kBF16; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.cache.head_dim = 32; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.cache.k_data = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.newest.cache = PagedKvCacheView{}; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.cache.k_zero_data = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.cache.k_stat_head_stride = 0; }), kInvalid);
  for (float v : batch.out()) ASSERT_TRUE(std::isnan(v));
  // The tables as built are accepted.
  EXPECT_EQ(code_of([](AttentionParams&) {}), StatusCode::kOk);
}

// ---- attention mass (token eviction): AttentionParams::mass ---------------------------------

// Each wanted token row's mass region, packed in token order with kMassGap sentinel floats
// between regions (and after the last), so a write outside a row's region shows up.
constexpr int32_t kMassGap = 3;
constexpr float kMassSentinel = -7.0f;

struct MassRun {
  std::vector<int64_t> offsets;  // [num_tokens], -1 for unwanted rows
  std::vector<float> mass;
  Status status;
};

// Runs the batch's attention with the mass of every token row wanted except those listed in
// `skip` (token rows of the batch).
MassRun run_with_mass(PagedBatch& batch, const std::vector<SeqSpec>& seqs, int32_t num_kv_heads,
                      int threads, const std::vector<int32_t>& skip = {}) {
  MassRun run;
  int64_t size = 0;
  for (const SeqSpec& s : seqs) {
    for (int32_t i = 0; i < s.q_len; ++i) {
      const auto t = static_cast<int32_t>(run.offsets.size());
      if (std::find(skip.begin(), skip.end(), t) != skip.end()) {
        run.offsets.push_back(-1);
        continue;
      }
      run.offsets.push_back(size);
      size += static_cast<int64_t>(num_kv_heads) * s.kv_len + kMassGap;
    }
  }
  run.mass.assign(static_cast<size_t>(size), kMassSentinel);
  AttentionParams p = batch.params();
  p.mass_offsets = run.offsets.data();
  p.mass = run.mass.data();
  run.status = paged_attention(p, pool_of(threads));
  return run;
}

// The mass of one query row in double, computed from the hashed Q/K values as the cache stores
// them (F32, BF16, F16): [num_kv_heads, kv_len], the sum over each group's heads of the softmax
// of scale * q.k over the row's causal (and windowed) range.
std::vector<double> reference_mass(const AttnConfig& cfg, const SeqSpec& seq, int32_t i,
                                   double scale) {
  const int32_t group = cfg.num_q_heads / cfg.num_kv_heads;
  const int32_t pos = seq.kv_len - seq.q_len + i;
  const int32_t first = cfg.sliding_window > 0 ? std::max(0, pos - cfg.sliding_window + 1) : 0;
  std::vector<double> mass(static_cast<size_t>(cfg.num_kv_heads) * seq.kv_len, 0.0);
  for (int32_t h = 0; h < cfg.num_q_heads; ++h) {
    const int32_t kv_head = h / group;
    std::vector<double> w;
    for (int32_t j = first; j <= pos; ++j) {
      double dot = 0.0;
      for (int32_t c = 0; c < cfg.head_dim; ++c) {
        dot += static_cast<double>(test_util::q_value(seq.data_id, pos, h, c)) *
               test_util::round_to(cfg.dtype, test_util::k_value(seq.data_id, j, kv_head, c));
      }
      w.push_back(scale * dot);
    }
    const double max = *std::max_element(w.begin(), w.end());
    double sum = 0.0;
    for (double& x : w) sum += (x = std::exp(x - max));
    for (int32_t j = first; j <= pos; ++j) {
      const double p = w[static_cast<size_t>(j - first)] / sum;
      mass[static_cast<size_t>(kv_head) * seq.kv_len + j] += p;
    }
  }
  return mass;
}

// Every wanted row: its KV heads' parts each sum to the group size, are exactly 0 outside the
// attended range, and the gap after the row is untouched; unwanted rows leave nothing behind.
void expect_mass_rows_well_formed(const AttnConfig& cfg, const std::vector<SeqSpec>& seqs,
                                  const MassRun& run, const std::string& what) {
  const int32_t group = cfg.num_q_heads / cfg.num_kv_heads;
  size_t t = 0;
  int64_t written = 0;
  for (const SeqSpec& s : seqs) {
    for (int32_t i = 0; i < s.q_len; ++i, ++t) {
      if (run.offsets[t] < 0) continue;
      const int32_t pos = s.kv_len - s.q_len + i;
      const int32_t first = cfg.sliding_window > 0 ? std::max(0, pos - cfg.sliding_window + 1) : 0;
      const float* row = run.mass.data() + run.offsets[t];
      for (int32_t h = 0; h < cfg.num_kv_heads; ++h) {
        double sum = 0.0;
        for (int32_t j = 0; j < s.kv_len; ++j) {
          const float m = row[static_cast<int64_t>(h) * s.kv_len + j];
          if (j < first || j > pos) {
            ASSERT_EQ(m, 0.0f) << what << " token " << t << " head " << h << " slot " << j;
          } else {
            ASSERT_GE(m, 0.0f) << what << " token " << t << " head " << h << " slot " << j;
          }
          sum += m;
        }
        EXPECT_NEAR(sum, group, 1e-5) << what << " token " << t << " head " << h;
      }
      const int64_t end = run.offsets[t] + static_cast<int64_t>(cfg.num_kv_heads) * s.kv_len;
      for (int64_t k = end; k < end + kMassGap; ++k) {
        ASSERT_EQ(run.mass[static_cast<size_t>(k)], kMassSentinel) << what << " token " << t;
      }
      written += end - run.offsets[t] + kMassGap;
    }
  }
  EXPECT_EQ(written, static_cast<int64_t>(run.mass.size())) << what;
}

TEST(PagedAttentionMassTest, MatchesFloat64ReferenceWithWindowsAndGroups) {
  // Prefill chunks on a cached prefix, decodes and a whole prefill, at block size 8.
  const std::vector<SeqSpec> seqs = {{7, 40, 11}, {1, 23, 12}, {9, 9, 13}, {0, 5, 14}, {1, 1, 15}};
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const HeadConfig& heads : kHeadConfigs) {
      for (const int32_t window : {0, 5}) {
        AttnConfig cfg;
        cfg.num_q_heads = heads.num_q_heads;
        cfg.num_kv_heads = heads.num_kv_heads;
        cfg.head_dim = 32;
        cfg.block_size = 8;
        cfg.dtype = dtype;
        cfg.sliding_window = window;
        const std::string what = case_name(cfg, heads);
        PagedBatch batch(cfg, seqs, /*shuffle_seed=*/3);
        // Token row 3 (the first chunk's fourth) is not wanted.
        const MassRun run = run_with_mass(batch, seqs, cfg.num_kv_heads, 2, /*skip=*/{3});
        ASSERT_TRUE(run.status.ok()) << run.status.message();
        expect_mass_rows_well_formed(cfg, seqs, run, what);
        const double scale = batch.params().scale;
        size_t t = 0;
        for (const SeqSpec& s : seqs) {
          for (int32_t i = 0; i < s.q_len; ++i, ++t) {
            if (run.offsets[t] < 0) continue;
            const std::vector<double> ref = reference_mass(cfg, s, i, scale);
            const float* row = run.mass.data() + run.offsets[t];
            for (size_t k = 0; k < ref.size(); ++k) {
              ASSERT_NEAR(row[k], ref[k], 1e-5) << what << " token " << t << " element " << k;
            }
          }
        }
        // The output is what it is without the mass.
        EXPECT_LT(batch.max_row_error(), Tolerance::kAttention) << what;
      }
    }
  }
}

TEST(PagedAttentionMassTest, RowsSumToTheGroupForEveryCacheDType) {
  for (const DType dtype : kAttentionKvDTypes) {
    for (const int32_t window : {0, 16}) {
      AttnConfig cfg;
      cfg.dtype = dtype;
      cfg.block_size = 16;
      cfg.sliding_window = window;
      cfg.newest_blocks = 2;
      const std::vector<SeqSpec> seqs = ragged_batch(97);
      PagedBatch batch(cfg, seqs, /*shuffle_seed=*/8);
      const MassRun run = run_with_mass(batch, seqs, cfg.num_kv_heads, 3);
      ASSERT_TRUE(run.status.ok()) << run.status.message();
      expect_mass_rows_well_formed(cfg, seqs, run, case_name(cfg, kHeadConfigs[0]));
    }
  }
}

// The mass row of token row `token` of a run.
std::vector<float> mass_row(const MassRun& run, int32_t token, int64_t size) {
  const float* row = run.mass.data() + run.offsets[static_cast<size_t>(token)];
  return {row, row + size};
}

TEST(PagedAttentionMassTest, BitIdenticalAloneOrInBatchAtAnyThreadCount) {
  for (const DType dtype : {DType::kF32, DType::kI8, DType::kI4}) {
    AttnConfig cfg;
    cfg.dtype = dtype;
    cfg.block_size = 8;
    cfg.newest_blocks = 2;
    const SeqSpec target = {5, 50, 7};
    const int64_t size = static_cast<int64_t>(cfg.num_kv_heads) * target.kv_len;
    PagedBatch alone(cfg, {target}, /*shuffle_seed=*/1);
    const MassRun one = run_with_mass(alone, {target}, cfg.num_kv_heads, 1);
    ASSERT_TRUE(one.status.ok()) << one.status.message();
    for (int threads : {1, 2, 3}) {
      const std::vector<SeqSpec> seqs = {{1, 30, 1}, {20, 20, 2}, target, {4, 64, 3}};
      PagedBatch batch(cfg, seqs, /*shuffle_seed=*/static_cast<uint32_t>(10 + threads));
      const MassRun many = run_with_mass(batch, seqs, cfg.num_kv_heads, threads);
      ASSERT_TRUE(many.status.ok()) << many.status.message();
      for (int32_t i = 0; i < target.q_len; ++i) {
        EXPECT_EQ(mass_row(one, i, size), mass_row(many, batch.q_begin(2) + i, size))
            << dtype_name(dtype) << " threads " << threads << " row " << i;
      }
    }
  }
}

TEST(PagedAttentionMassTest, ChunkedPrefillBitIdenticalToWholePrefill) {
  for (const int32_t window : {0, 20}) {
    AttnConfig cfg;
    cfg.block_size = 8;
    cfg.sliding_window = window;
    const int32_t len = 97;
    const std::vector<SeqSpec> whole_seqs = {{len, len, 5}};
    PagedBatch whole(cfg, whole_seqs, /*shuffle_seed=*/1);
    const MassRun all = run_with_mass(whole, whole_seqs, cfg.num_kv_heads, 2);
    ASSERT_TRUE(all.status.ok()) << all.status.message();
    const std::vector<std::pair<int32_t, int32_t>> chunks = {{0, 40}, {40, 41}, {41, 80}, {80, 97}};
    for (const auto& [begin, end] : chunks) {
      // A chunk's rows see kv_len = end; the whole prefill's rows see 97: the attended slots
      // (0 .. pos) agree bit for bit, and the rest is 0 in both.
      const std::vector<SeqSpec> seqs = {{1, 33, 6}, {end - begin, end, 5}};
      PagedBatch chunk(cfg, seqs, /*shuffle_seed=*/static_cast<uint32_t>(end));
      const MassRun part = run_with_mass(chunk, seqs, cfg.num_kv_heads, 3);
      ASSERT_TRUE(part.status.ok()) << part.status.message();
      for (int32_t pos = begin; pos < end; ++pos) {
        const std::vector<float> w = mass_row(all, pos, int64_t{cfg.num_kv_heads} * len);
        const std::vector<float> c =
            mass_row(part, chunk.q_begin(1) + pos - begin, int64_t{cfg.num_kv_heads} * end);
        for (int32_t h = 0; h < cfg.num_kv_heads; ++h) {
          const auto w_head = w.begin() + static_cast<int64_t>(h) * len;
          const auto c_head = c.begin() + static_cast<int64_t>(h) * end;
          EXPECT_TRUE(std::equal(c_head, c_head + end, w_head))
              << "window " << window << " position " << pos << " head " << h;
          EXPECT_TRUE(std::all_of(w_head + end, w_head + len, [](float m) { return m == 0.0f; }));
        }
      }
    }
  }
}

TEST(PagedAttentionMassTest, RejectsMassWithoutOffsetsAndViceVersa) {
  AttnConfig cfg;
  PagedBatch batch(cfg, {{2, 10, 1}, {1, 5, 2}}, /*shuffle_seed=*/1);
  std::vector<float> mass(64, kMassSentinel);
  const std::vector<int64_t> offsets = {0, 20, 40};
  AttentionParams p = batch.params();
  p.mass = mass.data();
  EXPECT_EQ(paged_attention(p, pool_of(1)).code(), StatusCode::kInvalidArgument);
  p.mass = nullptr;
  p.mass_offsets = offsets.data();
  EXPECT_EQ(paged_attention(p, pool_of(1)).code(), StatusCode::kInvalidArgument);
  for (float v : batch.out()) ASSERT_TRUE(std::isnan(v));
  for (float m : mass) ASSERT_EQ(m, kMassSentinel);
}

// ---- errors ----------------------------------------------------------------------------------

// ---- query tiles: tasks of several tokens share K/V reads but never change a bit -------------

// The batch's outputs and attention mass (every row wanted) with tasks of up to tile_tokens.
struct TiledRun {
  std::vector<float> out;
  std::vector<float> mass;
};

TiledRun run_tiled(PagedBatch& batch, const std::vector<SeqSpec>& seqs, int32_t num_kv_heads,
                   CpuIsa isa, int32_t tile_tokens, int threads) {
  std::vector<int64_t> offsets;
  int64_t size = 0;
  for (const SeqSpec& s : seqs) {
    for (int32_t i = 0; i < s.q_len; ++i) {
      offsets.push_back(size);
      size += static_cast<int64_t>(num_kv_heads) * s.kv_len;
    }
  }
  TiledRun run;
  run.mass.assign(static_cast<size_t>(size), kMassSentinel);
  AttentionParams p = batch.params();
  p.mass_offsets = offsets.data();
  p.mass = run.mass.data();
  EXPECT_TRUE(detail::paged_attention_with(p, pool_of(threads), isa, tile_tokens).ok());
  run.out = batch.out();
  return run;
}

bool bit_equal_vectors(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && bit_equal(a.data(), b.data(), static_cast<int64_t>(a.size()));
}

TEST(PagedAttentionTileTest, TileSizeNeverChangesABitOnAnyPath) {
  // Tasks of one token are the row-at-a-time structure; larger tiles must give the same bits for
  // every row: whole prefills of odd lengths, a chunk on a cached prefix, decodes, windows that
  // cut inside a tile, a group of 7 query heads (Qwen2-0.5B's 14 / 2) and the other head
  // layouts, every cache dtype. Each path is held to itself at one token per task (AVX2 and
  // AVX-512 fuse, so they differ from the portable path in the last bits) and to the float64
  // reference.
  const std::vector<SeqSpec> seqs = {{37, 37, 1}, {13, 50, 2}, {1, 29, 3}, {70, 70, 4}};
  constexpr HeadConfig kQwen2 = {14, 2, "Qwen2"};
  for (const DType dtype : kAttentionKvDTypes) {
    for (const HeadConfig& heads : {kQwen2, kHeadConfigs[0], kHeadConfigs[1], kHeadConfigs[2]}) {
      for (const int32_t block_size : {8, 16}) {
        for (const int32_t window : {0, 1, 6, 16, 33}) {
          AttnConfig cfg;
          cfg.num_q_heads = heads.num_q_heads;
          cfg.num_kv_heads = heads.num_kv_heads;
          // The Qwen2 head dim; elsewhere 32 + a tail of 4 lanes.
          cfg.head_dim = heads.num_q_heads == kQwen2.num_q_heads ? 64 : 36;
          cfg.block_size = block_size;
          cfg.dtype = dtype;
          cfg.sliding_window = window;
          cfg.newest_blocks = 2;
          PagedBatch batch(cfg, seqs, /*shuffle_seed=*/static_cast<uint32_t>(window + 1));
          const int32_t kv_heads = cfg.num_kv_heads;
          const TiledRun unfused = run_tiled(batch, seqs, kv_heads, CpuIsa::kPortable, 1, 1);
          EXPECT_LT(batch.max_row_error(), Tolerance::kAttention) << case_name(cfg, heads);
          for (const CpuIsa isa : kCpuIsas) {
            if (!cpu_supports(isa)) continue;
            const TiledRun rows =
                isa == CpuIsa::kPortable ? unfused : run_tiled(batch, seqs, kv_heads, isa, 1, 1);
            for (const int32_t tile : {1, 2, 3, 4, 8, 64}) {
              const TiledRun tiled = run_tiled(batch, seqs, kv_heads, isa, tile, 2);
              const std::string what = case_name(cfg, heads) + " isa " +
                                       std::to_string(static_cast<int>(isa)) + " tile " +
                                       std::to_string(tile);
              EXPECT_TRUE(bit_equal_vectors(rows.out, tiled.out)) << what;
              EXPECT_TRUE(bit_equal_vectors(rows.mass, tiled.mass)) << what;
            }
            EXPECT_LT(batch.max_row_error(), Tolerance::kAttention) << case_name(cfg, heads);
          }
        }
      }
    }
  }
}

TEST(PagedAttentionTileTest, ChunksCutAcrossTilesMatchTheWholePrefill) {
  // Chunk boundaries that fall inside the whole prefill's tiles (and so start tiles at other
  // positions), with the default tile, a window and the Qwen2 group, against the whole prefill.
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int32_t window : {0, 11}) {
      AttnConfig cfg;
      cfg.num_q_heads = 14;
      cfg.num_kv_heads = 2;
      cfg.block_size = 16;
      cfg.dtype = dtype;
      cfg.sliding_window = window;
      const int32_t len = 83;
      PagedBatch whole(cfg, {{len, len, 5}}, /*shuffle_seed=*/1);
      ASSERT_TRUE(paged_attention(whole.params(), pool_of(2)).ok());
      for (const auto& [begin, end] : std::vector<std::pair<int32_t, int32_t>>{
               {0, 5}, {5, 18}, {18, 19}, {19, 54}, {54, 83}}) {
        PagedBatch chunk(cfg, {{3, 21, 6}, {end - begin, end, 5}},
                         /*shuffle_seed=*/static_cast<uint32_t>(end));
        ASSERT_TRUE(paged_attention(chunk.params(), pool_of(3)).ok());
        EXPECT_TRUE(bit_equal(whole.out_row(begin), chunk.out_row(chunk.q_begin(1)),
                              (end - begin) * whole.row_elems()))
            << dtype_name(dtype) << " window " << window << " chunk [" << begin << ", " << end
            << ")";
      }
    }
  }
}

TEST(PagedAttentionTileTest, RejectsANonPositiveTile) {
  AttnConfig cfg;
  PagedBatch batch(cfg, {{3, 3, 1}}, /*shuffle_seed=*/1);
  EXPECT_FALSE(detail::paged_attention_with(batch.params(), pool_of(1), CpuIsa::kPortable, 0).ok());
}

TEST(PagedAttentionTest, RejectsInvalidParams) {
  AttnConfig cfg;
  PagedBatch batch(cfg, {{2, 10, 1}, {1, 5, 2}}, /*shuffle_seed=*/1);
  const auto code_of = [&](auto mutate) {
    AttentionParams p = batch.params();
    mutate(p);
    return paged_attention(p, pool_of(1)).code();
  };
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_EQ(code_of([](AttentionParams& p) { p.q = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.out = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.q_indptr = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.layout.kv_indices = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.cache.k_data = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.num_q_heads = 7; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.num_q_heads = 0; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.layout.block_size = 32; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.sliding_window = -1; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.cache.dtype = DType::kI16; }),
            StatusCode::kUnsupported);
  EXPECT_EQ(code_of([](AttentionParams& p) { p.cache.dtype = DType::kU8; }),
            StatusCode::kUnsupported);
  // Quantized dtypes need their scales: an I8 view without scale areas, FP8 with a zero or NaN
  // static scale.
  EXPECT_EQ(code_of([](AttentionParams& p) { p.cache.dtype = DType::kI8; }), kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) {
              p.cache.dtype = DType::kF8E4M3;
              p.cache.k_scale = 0.0f;
            }),
            kInvalid);
  EXPECT_EQ(code_of([](AttentionParams& p) {
              p.cache.dtype = DType::kF8E5M2;
              p.cache.v_scale = std::numeric_limits<float>::quiet_NaN();
            }),
            kInvalid);

  // q_len > kv_len: sequence 1 gets 11 query rows but holds 5 tokens.
  const std::vector<int32_t> long_q = {0, 2, 13};
  EXPECT_EQ(code_of([&](AttentionParams& p) { p.q_indptr = long_q.data(); }), kInvalid);
  const std::vector<int32_t> bad_last = {16, 0};
  EXPECT_EQ(code_of([&](AttentionParams& p) { p.layout.kv_last_page_len = bad_last.data(); }),
            kInvalid);
  const std::vector<int32_t> bad_indices = {-3, 1};
  EXPECT_EQ(code_of([&](AttentionParams& p) { p.layout.kv_indices = bad_indices.data(); }),
            kInvalid);
  // Nothing was written by any rejected call.
  for (float v : batch.out()) ASSERT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace strata::cpu

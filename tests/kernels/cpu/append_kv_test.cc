#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/attention.h"
#include "kv/kv_layout.h"
#include "paged_batch.h"

namespace strata::cpu {
namespace {

using test_util::hashed_uniform;

constexpr int32_t kNumKvHeads = 2;
constexpr int32_t kHeadDim = 24;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 6;

struct AppendFixture {
  explicit AppendFixture(DType dtype)
      : layout(kv::KvSpec{2, kNumKvHeads, kHeadDim, dtype}, kBlockSize),
        pool(static_cast<size_t>(layout.pool_bytes(kNumBlocks)), 0xFF),
        expected(pool) {}

  PagedKvCacheView view(std::vector<uint8_t>& bytes) { return layout.layer_view(bytes.data(), 1); }

  kv::KvLayout layout;
  std::vector<uint8_t> pool;
  std::vector<uint8_t> expected;
};

// K/V rows of num_tokens tokens, [num_tokens, kNumKvHeads, kHeadDim].
std::vector<float> token_rows(int64_t num_tokens, uint64_t salt) {
  std::vector<float> rows(static_cast<size_t>(num_tokens * kNumKvHeads * kHeadDim));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 3.0f * hashed_uniform(salt, i);
  return rows;
}

// The expected pool, written element by element through the view's accessors.
void write_expected(PagedKvCacheView view, const std::vector<float>& k, const std::vector<float>& v,
                    const std::vector<int64_t>& slots) {
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] == -1) continue;
    const auto block_id = static_cast<int32_t>(slots[t] / kBlockSize);
    const auto tok = static_cast<int32_t>(slots[t] % kBlockSize);
    for (int32_t h = 0; h < kNumKvHeads; ++h) {
      for (int32_t c = 0; c < kHeadDim; ++c) {
        const size_t src =
            (t * kNumKvHeads + static_cast<size_t>(h)) * kHeadDim + static_cast<size_t>(c);
        if (view.dtype == DType::kF32) {
          view.k<float>(block_id, h, tok)[c] = k[src];
          view.v<float>(block_id, h, tok)[c] = v[src];
        } else {
          const bool bf16 = view.dtype == DType::kBF16;
          view.k<uint16_t>(block_id, h, tok)[c] = bf16 ? f32_to_bf16(k[src]) : f32_to_f16(k[src]);
          view.v<uint16_t>(block_id, h, tok)[c] = bf16 ? f32_to_bf16(v[src]) : f32_to_f16(v[src]);
        }
      }
    }
  }
}

TEST(AppendKvTest, WritesEachTokenAtItsSlotAndSkipsPadding) {
  // Non-contiguous blocks, a token at the last offset of a block, and two padding tokens.
  const std::vector<int64_t> slots = {5 * 16 + 0, 5 * 16 + 1, -1,         2 * 16 + 15, 1 * 16 + 3,
                                      -1,         3 * 16 + 7, 5 * 16 + 2, 4 * 16 + 0,  2 * 16 + 14};
  const auto n = static_cast<int64_t>(slots.size());
  const std::vector<float> k = token_rows(n, 1);
  const std::vector<float> v = token_rows(n, 2);
  for (DType dtype : kAttentionKvDTypes) {
    for (int threads : {1, 3}) {
      AppendFixture f(dtype);
      write_expected(f.view(f.expected), k, v, slots);
      ThreadPool pool(threads);
      AppendKvParams p;
      p.k = k.data();
      p.v = v.data();
      p.slot_mapping = slots.data();
      p.num_tokens = n;
      p.cache = f.view(f.pool);
      p.num_cache_blocks = kNumBlocks;
      ASSERT_TRUE(append_kv(p, pool).ok());
      EXPECT_EQ(std::memcmp(f.pool.data(), f.expected.data(), f.pool.size()), 0)
          << dtype_name(dtype) << " threads " << threads;
    }
  }
}

TEST(AppendKvTest, AppendedTokensAreWhatAttentionReads) {
  // Appending a prefill's K/V then attending gives the reference over the same values.
  test_util::AttnConfig cfg;
  cfg.num_q_heads = 4;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 16;
  cfg.block_size = 8;
  cfg.dtype = DType::kBF16;
  test_util::PagedBatch batch(cfg, {{21, 21, 4}}, /*shuffle_seed=*/2);
  // Recreate the cache contents through append_kv into a wiped pool.
  const PagedKvLayout layout = batch.layout();
  std::vector<float> k(21 * 2 * 16);
  std::vector<float> v(k.size());
  std::vector<int64_t> slots(21);
  for (int32_t pos = 0; pos < 21; ++pos) {
    slots[static_cast<size_t>(pos)] =
        static_cast<int64_t>(layout.block_of(0, pos)) * cfg.block_size + pos % cfg.block_size;
    for (int32_t h = 0; h < 2; ++h) {
      for (int32_t c = 0; c < 16; ++c) {
        const size_t i =
            (static_cast<size_t>(pos) * 2 + static_cast<size_t>(h)) * 16 + static_cast<size_t>(c);
        k[i] = test_util::k_value(4, pos, h, c);
        v[i] = test_util::v_value(4, pos, h, c);
      }
    }
  }
  std::fill(batch.pool().begin(), batch.pool().end(), 0xFF);
  ThreadPool pool(2);
  AppendKvParams p;
  p.k = k.data();
  p.v = v.data();
  p.slot_mapping = slots.data();
  p.num_tokens = 21;
  p.cache = batch.view();
  p.num_cache_blocks = batch.num_pool_blocks();
  ASSERT_TRUE(append_kv(p, pool).ok());
  ASSERT_TRUE(paged_attention(batch.params(), pool).ok());
  EXPECT_LT(batch.max_row_error(), test_util::Tolerance::kAttention);
}

TEST(AppendKvTest, RejectsBadSlotsAndParamsWithoutWriting) {
  const std::vector<float> k = token_rows(2, 1);
  const std::vector<float> v = token_rows(2, 2);
  AppendFixture f(DType::kF32);
  ThreadPool pool(1);
  const auto code_of = [&](std::vector<int64_t> slots, auto mutate) {
    AppendKvParams p;
    p.k = k.data();
    p.v = v.data();
    p.slot_mapping = slots.data();
    p.num_tokens = 2;
    p.cache = f.view(f.pool);
    p.num_cache_blocks = kNumBlocks;
    mutate(p);
    return append_kv(p, pool).code();
  };
  const auto keep = [](AppendKvParams&) {};
  EXPECT_EQ(code_of({17, -2}, keep), StatusCode::kOutOfRange);
  EXPECT_EQ(code_of({17, kNumBlocks * kBlockSize}, keep), StatusCode::kOutOfRange);
  EXPECT_EQ(code_of({17, 18}, [](AppendKvParams& p) { p.k = nullptr; }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of({17, 18}, [](AppendKvParams& p) { p.num_tokens = -1; }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of({17, 18}, [](AppendKvParams& p) { p.cache.dtype = DType::kF8E5M2; }),
            StatusCode::kUnsupported);
  EXPECT_EQ(std::memcmp(f.pool.data(), f.expected.data(), f.pool.size()), 0);
  // Without num_cache_blocks the upper bound is the caller's to keep; -1 still skips.
  EXPECT_EQ(code_of({-1, -1}, [](AppendKvParams& p) { p.num_cache_blocks = 0; }), StatusCode::kOk);
  EXPECT_EQ(std::memcmp(f.pool.data(), f.expected.data(), f.pool.size()), 0);
}

}  // namespace
}  // namespace strata::cpu

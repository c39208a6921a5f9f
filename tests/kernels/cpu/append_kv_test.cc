#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "int4_reference.h"
#include "kernel_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kv_quant_avx512.h"
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
      : layout(kv::KvSpec{2, kNumKvHeads, kHeadDim, dtype}, kBlockSize,
               dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2
                   ? kv::KvStaticScales{{0.01f, 0.02f}, {0.03f, 0.015f}}
                   : kv::KvStaticScales{}),
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

// The documented INT8 encoding (kv_quant.h), written out independently: the fp16 scale of
// max|x| / 127 and codes round(x / s) clamped to +-127.
uint16_t expected_int8(const float* x, int32_t n, int8_t* codes) {
  double amax = 0.0;
  for (int32_t c = 0; c < n; ++c) amax = std::max(amax, std::abs(static_cast<double>(x[c])));
  const uint16_t bits = f32_to_f16(static_cast<float>(amax) / 127.0f);
  const double s = f16_to_f32(bits);
  for (int32_t c = 0; c < n; ++c) {
    const double r = std::nearbyint(static_cast<float>(x[c] / static_cast<float>(s)));
    codes[c] = static_cast<int8_t>(std::max(-127.0, std::min(127.0, r)));
  }
  return bits;
}

// The expected pool, written element by element through the view's accessors.
void write_expected(PagedKvCacheView view, const std::vector<float>& k, const std::vector<float>& v,
                    const std::vector<int64_t>& slots) {
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] == -1) continue;
    const auto block_id = static_cast<int32_t>(slots[t] / kBlockSize);
    const auto tok = static_cast<int32_t>(slots[t] % kBlockSize);
    for (int32_t h = 0; h < kNumKvHeads; ++h) {
      const size_t row = (t * kNumKvHeads + static_cast<size_t>(h)) * kHeadDim;
      if (view.dtype == DType::kI8) {
        auto* ks = static_cast<uint16_t*>(view.k_scale_data);
        auto* vs = static_cast<uint16_t*>(view.v_scale_data);
        ks[view.scale_offset(block_id, h, tok)] =
            expected_int8(&k[row], kHeadDim, view.k<int8_t>(block_id, h, tok));
        vs[view.scale_offset(block_id, h, tok)] =
            expected_int8(&v[row], kHeadDim, view.v<int8_t>(block_id, h, tok));
        continue;
      }
      for (int32_t c = 0; c < kHeadDim; ++c) {
        const size_t src = row + static_cast<size_t>(c);
        switch (view.dtype) {
          case DType::kF32:
            view.k<float>(block_id, h, tok)[c] = k[src];
            view.v<float>(block_id, h, tok)[c] = v[src];
            break;
          case DType::kBF16:
            view.k<uint16_t>(block_id, h, tok)[c] = f32_to_bf16(k[src]);
            view.v<uint16_t>(block_id, h, tok)[c] = f32_to_bf16(v[src]);
            break;
          case DType::kF16:
            view.k<uint16_t>(block_id, h, tok)[c] = f32_to_f16(k[src]);
            view.v<uint16_t>(block_id, h, tok)[c] = f32_to_f16(v[src]);
            break;
          case DType::kF8E4M3:
            view.k<uint8_t>(block_id, h, tok)[c] = f32_to_fp8_e4m3(k[src] / view.k_scale);
            view.v<uint8_t>(block_id, h, tok)[c] = f32_to_fp8_e4m3(v[src] / view.v_scale);
            break;
          case DType::kF8E5M2:
            view.k<uint8_t>(block_id, h, tok)[c] = f32_to_fp8_e5m2(k[src] / view.k_scale);
            view.v<uint8_t>(block_id, h, tok)[c] = f32_to_fp8_e5m2(v[src] / view.v_scale);
            break;
          default:
            FAIL() << "unexpected dtype";
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
    if (dtype == DType::kI4)
      continue;  // a block at a time, from a newest-blocks pool: AppendKvInt4Test
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
  EXPECT_EQ(code_of({17, 18}, [](AppendKvParams& p) { p.cache.dtype = DType::kI16; }),
            StatusCode::kUnsupported);
  EXPECT_EQ(code_of({17, 18}, [](AppendKvParams& p) { p.cache.dtype = DType::kI8; }),
            StatusCode::kInvalidArgument);  // an I8 view without its scale areas
  EXPECT_EQ(std::memcmp(f.pool.data(), f.expected.data(), f.pool.size()), 0);
  // Without num_cache_blocks the upper bound is the caller's to keep; -1 still skips.
  EXPECT_EQ(code_of({-1, -1}, [](AppendKvParams& p) { p.num_cache_blocks = 0; }), StatusCode::kOk);
  EXPECT_EQ(std::memcmp(f.pool.data(), f.expected.data(), f.pool.size()), 0);
}

TEST(AppendKvTest, QuantizedRowsDecodeToTheSameBitsOnEveryPath) {
  // The AVX-512 decoders (masked tails: head_dim 24 = 16 + 8) against the portable loop, and
  // both against the documented formula.
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const std::vector<int64_t> slots = {1 * 16 + 0, 1 * 16 + 1, 1 * 16 + 2, 3 * 16 + 5};
  const auto n = static_cast<int64_t>(slots.size());
  const std::vector<float> k = token_rows(n, 5);
  const std::vector<float> v = token_rows(n, 6);
  for (const DType dtype : {DType::kF8E4M3, DType::kF8E5M2, DType::kI8}) {
    AppendFixture f(dtype);
    ThreadPool pool(1);
    AppendKvParams p;
    p.k = k.data();
    p.v = v.data();
    p.slot_mapping = slots.data();
    p.num_tokens = n;
    p.cache = f.view(f.pool);
    ASSERT_TRUE(append_kv(p, pool).ok());
    for (const KvPart part : {KvPart::kK, KvPart::kV}) {
      std::vector<float> portable(3 * kHeadDim);
      std::vector<float> avx(3 * kHeadDim);
      load_kv_rows(p.cache, part, 1, 1, 0, 3, portable.data(), /*use_avx512=*/false);
      load_kv_rows(p.cache, part, 1, 1, 0, 3, avx.data(), /*use_avx512=*/true);
      EXPECT_EQ(std::memcmp(portable.data(), avx.data(), portable.size() * sizeof(float)), 0)
          << dtype_name(dtype);
      // Token 1 of head 1, channel 5, by the formula.
      const int64_t at = p.cache.offset(1, 1, 1) + 5;
      const void* data = part == KvPart::kK ? p.cache.k_data : p.cache.v_data;
      float want = 0.0f;
      if (dtype == DType::kI8) {
        const void* scales = part == KvPart::kK ? p.cache.k_scale_data : p.cache.v_scale_data;
        want = static_cast<float>(static_cast<const int8_t*>(data)[at]) *
               f16_to_f32(static_cast<const uint16_t*>(scales)[p.cache.scale_offset(1, 1, 1)]);
      } else {
        const uint8_t code = static_cast<const uint8_t*>(data)[at];
        want = (dtype == DType::kF8E4M3 ? fp8_e4m3_to_f32(code) : fp8_e5m2_to_f32(code)) *
               (part == KvPart::kK ? p.cache.k_scale : p.cache.v_scale);
      }
      EXPECT_EQ(portable[kHeadDim + 5], want) << dtype_name(dtype);
      // And close to what was written (slot 17 = token 1 of block 1 is input row 1).
      const float written = (part == KvPart::kK ? k : v)[(1 * kNumKvHeads + 1) * kHeadDim + 5];
      EXPECT_NEAR(want, written, 0.15f * std::abs(written) + 0.02f) << dtype_name(dtype);
    }
  }
}

TEST(AppendKvTest, EveryFp8CodeDecodesToTheSameBitsOnEveryPath) {
  // All 256 codes of each format in one row (255 of them: a masked tail), scale 0.37.
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[static_cast<size_t>(c)] = static_cast<uint8_t>(c);
  for (const DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    const float* table = dtype == DType::kF8E4M3 ? fp8_e4m3_table() : fp8_e5m2_table();
    for (const int64_t n : {int64_t{256}, int64_t{255}}) {
      std::vector<float> got(256, -1.0f);
      detail::dequantize_fp8_avx512(codes.data(), dtype == DType::kF8E4M3, 0.37f, n, got.data());
      for (int64_t c = 0; c < n; ++c) {
        const float want = table[c] * 0.37f;
        const float g = got[static_cast<size_t>(c)];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(g)) << dtype_name(dtype) << " code " << c;
        } else {
          EXPECT_EQ(std::memcmp(&g, &want, sizeof(float)), 0)
              << dtype_name(dtype) << " code " << c << ": " << g << " vs " << want;
        }
      }
      if (n == 255) {
        EXPECT_EQ(got[255], -1.0f);  // the masked tail wrote nothing more
      }
    }
  }
}

TEST(AppendKvTest, Int8RowsDecodeWithinHalfAStepAndExtremesAreExact) {
  // Every channel decodes to within s / 2 of its input, the row's largest |x| to exactly +-127 s
  // (up to the fp16 rounding of s), and an all-zero row to zeros with a zero scale.
  std::vector<float> x(kHeadDim);
  for (int32_t c = 0; c < kHeadDim; ++c) x[static_cast<size_t>(c)] = 5.0f * hashed_uniform(9, c);
  x[7] = -6.5f;
  std::vector<int8_t> codes(kHeadDim);
  const float s = f16_to_f32(quantize_int8_row(x.data(), kHeadDim, codes.data()));
  EXPECT_NEAR(s, 6.5 / 127, 6.5 / 127 * 1e-3);
  EXPECT_EQ(codes[7], -127);
  for (int32_t c = 0; c < kHeadDim; ++c) {
    const auto i = static_cast<size_t>(c);
    EXPECT_LE(std::abs(codes[i] * s - x[i]), s / 2 + 1e-6f);
  }
  std::vector<float> zeros(kHeadDim, 0.0f);
  EXPECT_EQ(quantize_int8_row(zeros.data(), kHeadDim, codes.data()), 0);
  EXPECT_TRUE(std::all_of(codes.begin(), codes.end(), [](int8_t c) { return c == 0; }));
  // NaN and inf inputs never reach an undefined float -> int conversion.
  x[3] = std::nanf("");
  x[4] = INFINITY;
  quantize_int8_row(x.data(), kHeadDim, codes.data());
  EXPECT_EQ(codes[3], 0);
  EXPECT_EQ(codes[4], 127);
}

// ---- INT4: full-precision rows to the newest-blocks pool, int4 blocks when they fill ---------

// An I4 layout and its F32 newest-blocks pool; cache block b's full-precision copy is block
// kMirror[b] (another order, as the engine's allocator would give).
struct Int4Fixture {
  static constexpr int32_t kMirror[kNumBlocks] = {0, 4, 5, 1, 2, 3};

  Int4Fixture()
      : layout(kv::KvSpec{2, kNumKvHeads, kHeadDim, DType::kI4}, kBlockSize),
        newest_layout(kv::KvSpec{2, kNumKvHeads, kHeadDim, DType::kF32}, kBlockSize),
        pool(static_cast<size_t>(layout.pool_bytes(kNumBlocks)), 0xFF),
        newest_pool(static_cast<size_t>(newest_layout.pool_bytes(kNumBlocks)), 0xFF),
        expected(pool),
        expected_newest(newest_pool) {}

  // -1 for -1; a slot beyond the pool maps to itself (for the OutOfRange cases).
  static int64_t newest_slot(int64_t slot) {
    if (slot < 0 || slot >= kNumBlocks * kBlockSize) return slot;
    return kMirror[slot / kBlockSize] * kBlockSize + slot % kBlockSize;
  }

  AppendKvParams params(const std::vector<float>& k, const std::vector<float>& v,
                        const std::vector<int64_t>& slots, std::vector<int64_t>& newest_slots) {
    newest_slots.clear();
    for (const int64_t s : slots) newest_slots.push_back(newest_slot(s));
    AppendKvParams p;
    p.k = k.data();
    p.v = v.data();
    p.slot_mapping = slots.data();
    p.num_tokens = static_cast<int64_t>(slots.size());
    p.cache = layout.layer_view(pool.data(), 1);
    p.num_cache_blocks = kNumBlocks;
    p.newest_slot_mapping = newest_slots.data();
    p.newest = newest_layout.layer_view(newest_pool.data(), 1);
    p.num_newest_blocks = kNumBlocks;
    return p;
  }

  // The expected pools after appending rows k / v at slots: full-precision rows copied, and each
  // block whose last slot is among them quantized (by the reference) from the expected newest_pool.
  void expect(const std::vector<float>& k, const std::vector<float>& v,
              const std::vector<int64_t>& slots) {
    const PagedKvCacheView res = newest_layout.layer_view(expected_newest.data(), 1);
    for (size_t t = 0; t < slots.size(); ++t) {
      if (slots[t] == -1) continue;
      const int64_t r = newest_slot(slots[t]);
      for (int32_t h = 0; h < kNumKvHeads; ++h) {
        const size_t row = (t * kNumKvHeads + static_cast<size_t>(h)) * kHeadDim;
        const auto block = static_cast<int32_t>(r / kBlockSize);
        const auto tok = static_cast<int32_t>(r % kBlockSize);
        std::memcpy(res.k<float>(block, h, tok), &k[row], kHeadDim * sizeof(float));
        std::memcpy(res.v<float>(block, h, tok), &v[row], kHeadDim * sizeof(float));
      }
    }
    const PagedKvCacheView cache = layout.layer_view(expected.data(), 1);
    for (const int64_t slot : slots) {
      if (slot == -1 || slot % kBlockSize != kBlockSize - 1) continue;
      const int32_t rb = kMirror[slot / kBlockSize];
      test_util::write_int4_block_reference(
          cache, static_cast<int32_t>(slot / kBlockSize),
          [&](int32_t h, int32_t t) { return res.k<float>(rb, h, t); },
          [&](int32_t h, int32_t t) { return res.v<float>(rb, h, t); });
    }
  }

  bool pools_as_expected() const {
    return std::memcmp(pool.data(), expected.data(), pool.size()) == 0 &&
           std::memcmp(newest_pool.data(), expected_newest.data(), newest_pool.size()) == 0;
  }

  kv::KvLayout layout;
  kv::KvLayout newest_layout;
  std::vector<uint8_t> pool, newest_pool, expected, expected_newest;
};

TEST(AppendKvInt4Test, QuantizesABlockOnlyWhenItsLastSlotIsWritten) {
  // Call 1: block 2's first 10 tokens (a partial block: its int4 area must stay untouched), all
  // of block 4 in shuffled order (filled: quantized), padding. Call 2: the rest of block 2, whose
  // first tokens are only in the newest-blocks pool now.
  std::vector<int64_t> first = {-1};
  for (int64_t i = 0; i < 10; ++i) first.push_back(2 * 16 + i);
  for (int64_t i = 15; i >= 0; --i) first.push_back(4 * 16 + (i * 7) % 16);
  first.push_back(-1);
  std::vector<int64_t> second;
  for (int64_t i = 10; i < 16; ++i) second.push_back(2 * 16 + i);
  for (int threads : {1, 3}) {
    Int4Fixture f;
    ThreadPool pool(threads);
    std::vector<int64_t> newest_slots;
    int salt = 0;
    for (const std::vector<int64_t>* slots : {&first, &second}) {
      const auto n = static_cast<int64_t>(slots->size());
      const std::vector<float> k = token_rows(n, 21 + salt);
      const std::vector<float> v = token_rows(n, 22 + salt);
      salt += 2;
      f.expect(k, v, *slots);
      ASSERT_TRUE(append_kv(f.params(k, v, *slots, newest_slots), pool).ok());
      EXPECT_TRUE(f.pools_as_expected()) << "threads " << threads << " call " << salt / 2;
      if (slots == &first) {
        // Block 2's int4 area (codes and statistics of layer 1) is still all 0xFF.
        const PagedKvCacheView view = f.layout.layer_view(f.pool.data(), 1);
        EXPECT_EQ(*view.k<uint8_t>(2, 0, 0), 0xFF);
        EXPECT_EQ(static_cast<const uint16_t*>(view.v_scale_data)[view.scale_offset(2, 1, 3)],
                  0xFFFF);
      }
    }
  }
}

TEST(AppendKvInt4Test, AppendedBlocksReadBackAsDocumented) {
  // load_kv_rows (portable and AVX-512) decodes what append_kv stored by the formula.
  Int4Fixture f;
  ThreadPool pool(1);
  std::vector<int64_t> slots;
  for (int64_t i = 0; i < 16; ++i) slots.push_back(3 * 16 + i);
  const std::vector<float> k = token_rows(16, 31);
  const std::vector<float> v = token_rows(16, 32);
  std::vector<int64_t> newest_slots;
  const AppendKvParams p = f.params(k, v, slots, newest_slots);
  ASSERT_TRUE(append_kv(p, pool).ok());
  for (const KvPart part : {KvPart::kK, KvPart::kV}) {
    std::vector<float> portable(5 * kHeadDim);
    load_kv_rows(p.cache, part, 3, 1, 9, 5, portable.data(), /*use_avx512=*/false);
    if (cpu_supports(CpuIsa::kAvx512)) {
      std::vector<float> avx(portable.size());
      load_kv_rows(p.cache, part, 3, 1, 9, 5, avx.data(), /*use_avx512=*/true);
      EXPECT_EQ(std::memcmp(portable.data(), avx.data(), portable.size() * sizeof(float)), 0);
    }
    // Token 10 (row 1 of the five), channel 7, by the formula; close to what was written.
    const auto* scales = static_cast<const uint16_t*>(part == KvPart::kK ? p.cache.k_scale_data
                                                                         : p.cache.v_scale_data);
    const auto* zeros = static_cast<const uint16_t*>(part == KvPart::kK ? p.cache.k_zero_data
                                                                        : p.cache.v_zero_data);
    const int64_t at = part == KvPart::kK
                           ? 3 * p.cache.scale_block_stride + 1 * p.cache.k_stat_head_stride + 7
                           : p.cache.scale_offset(3, 1, 10);
    const uint8_t byte =
        (part == KvPart::kK ? p.cache.k<uint8_t>(3, 1, 10) : p.cache.v<uint8_t>(3, 1, 10))[3];
    const float want = test_util::int4_read(static_cast<uint8_t>(byte >> 4), scales[at], zeros[at]);
    EXPECT_EQ(portable[kHeadDim + 7], want);
    const float written = (part == KvPart::kK ? k : v)[(10 * kNumKvHeads + 1) * kHeadDim + 7];
    EXPECT_NEAR(want, written, 0.5 * f16_to_f32(scales[at]) + 1e-6);
  }
}

TEST(AppendKvInt4Test, RejectsBadNewestBlocksSlotsAndViewsWithoutWriting) {
  const std::vector<float> k = token_rows(2, 1);
  const std::vector<float> v = token_rows(2, 2);
  Int4Fixture f;
  ThreadPool pool(1);
  const auto code_of = [&](std::vector<int64_t> slots, auto mutate) {
    std::vector<int64_t> newest_slots;
    AppendKvParams p = f.params(k, v, slots, newest_slots);
    mutate(p, newest_slots);
    return append_kv(p, pool).code();
  };
  using Slots = std::vector<int64_t>;
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  // 31 fills block 1: a call that went through would quantize it.
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams& p, Slots&) { p.newest_slot_mapping = nullptr; }),
            kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams&, Slots& r) { r[0] = -1; }), kInvalid);
  EXPECT_EQ(code_of({-1, 31}, [](AppendKvParams&, Slots& r) { r[0] = 5; }), kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams&, Slots& r) { r[1] += 1; }), kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams&, Slots& r) { r[1] = -2; }),
            StatusCode::kOutOfRange);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams&, Slots& r) { r[1] = kNumBlocks * 16 + 15; }),
            StatusCode::kOutOfRange);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams& p, Slots&) { p.num_newest_blocks = -1; }),
            kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams& p, Slots&) { p.newest.dtype = DType::kBF16; }),
            kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams& p, Slots&) { p.newest.num_kv_heads = 1; }),
            kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams& p, Slots&) { p.newest.v_data = nullptr; }),
            kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams& p, Slots&) { p.cache.v_zero_data = nullptr; }),
            kInvalid);
  EXPECT_EQ(code_of({30, 31}, [](AppendKvParams& p, Slots&) { p.cache.head_dim = 23; }), kInvalid);
  EXPECT_EQ(code_of({30, 6 * 16}, [](AppendKvParams&, Slots&) {}), StatusCode::kOutOfRange);
  EXPECT_TRUE(f.pools_as_expected());
  // Without num_newest_blocks the newest-blocks upper bound is the caller's; -1 still skips.
  EXPECT_EQ(code_of({-1, -1}, [](AppendKvParams& p, Slots&) { p.num_newest_blocks = 0; }),
            StatusCode::kOk);
  EXPECT_TRUE(f.pools_as_expected());
}

}  // namespace
}  // namespace strata::cpu

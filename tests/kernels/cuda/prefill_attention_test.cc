// Paged prefill attention against a double-precision CPU reference: prompt chunks on top of cached
// prefixes mixed with decode tokens in one ragged batch, every KV dtype x prefill head dim x block
// size, group sizes, sliding windows, a 2049-token prompt, head dim 256's own kernel. Outputs are
// poisoned first and every element (and the row padding) is checked. The warp-specialized kernel's
// schedules (PrefillWsVariant) are held to the reference and to each other bit for bit.

#include "kernels/cuda/prefill_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kv_test_pool.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/prefill_attention_impl.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

struct SeqShape {
  int32_t q_len;
  int32_t kv_len;
};

struct PrefillCase {
  DType dtype = DType::kBF16;
  int32_t head_dim = 128;
  int32_t block_size = 16;
  int32_t num_kv_heads = 2;
  int32_t group_size = 2;
  std::vector<SeqShape> seqs;
  int32_t window_left = -1;
  uint64_t seed = 1;
  detail::PrefillWsVariant variant = detail::kDefaultPrefillWsVariant;
  bool check = true;  // against the reference
};

// Runs c (against the reference when c.check); returns the output (rows of o_stride elements).
std::vector<uint16_t> run_prefill_case(const PrefillCase& c) {
  std::string desc = std::string(detail::prefill_ws_variant_name(c.variant)) + " " +
                     std::string(dtype_name(c.dtype)) + " hd" + std::to_string(c.head_dim) + " bs" +
                     std::to_string(c.block_size) + " g" + std::to_string(c.group_size) +
                     " window " + std::to_string(c.window_left) + " seqs";
  for (const SeqShape& s : c.seqs)
    desc += " " + std::to_string(s.q_len) + "/" + std::to_string(s.kv_len);
  SCOPED_TRACE(desc);
  std::mt19937_64 rng(c.seed);
  const int32_t num_seqs = static_cast<int32_t>(c.seqs.size());
  const int32_t num_qo_heads = c.num_kv_heads * c.group_size;
  const int32_t d = c.head_dim;

  std::vector<int32_t> kv_indptr{0}, last_len, qo_indptr{0};
  int32_t needed = 0;
  int32_t max_q_len = 0;
  for (const SeqShape& s : c.seqs) {
    const int32_t blocks = (s.kv_len + c.block_size - 1) / c.block_size;
    needed += blocks;
    kv_indptr.push_back(kv_indptr.back() + blocks);
    last_len.push_back(blocks == 0 ? 0 : s.kv_len - (blocks - 1) * c.block_size);
    qo_indptr.push_back(qo_indptr.back() + s.q_len);
    max_q_len = std::max(max_q_len, s.q_len);
  }
  const int32_t num_q = qo_indptr.back();
  const int32_t num_pool_blocks = needed + 3;
  std::vector<int32_t> ids(num_pool_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> indices(ids.begin(), ids.begin() + needed);

  const kv::KvLayout kv_layout = test_kv_layout(c.dtype, 2, c.num_kv_heads, d, c.block_size);
  const std::vector<uint16_t> pool = random_kv_pool(kv_layout, num_pool_blocks, rng);
  const DType qo_dtype = attention_qo_dtype(c.dtype);
  const int64_t q_stride = static_cast<int64_t>(num_qo_heads) * d + 8;
  const int64_t o_stride = static_cast<int64_t>(num_qo_heads) * d + 16;
  const std::vector<uint16_t> q = random_halves(static_cast<size_t>(std::max(num_q, 1)) * q_stride,
                                                qo_dtype, -3.0f, 3.0f, rng);

  DeviceBuffer d_pool = upload(pool);
  DeviceBuffer d_q = upload(q);
  DeviceBuffer d_qo = upload(qo_indptr);
  DeviceBuffer d_kv_indptr = upload(kv_indptr);
  DeviceBuffer d_indices = upload(indices.empty() ? std::vector<int32_t>{0} : indices);
  DeviceBuffer d_last = upload(last_len);
  DeviceBuffer d_o =
      upload(std::vector<uint16_t>(static_cast<size_t>(std::max(num_q, 1)) * o_stride, 0xFFFFu));

  PrefillAttentionParams p;
  p.q = d_q.data();
  p.q_token_stride = q_stride;
  p.o = d_o.data();
  p.o_token_stride = o_stride;
  p.qo_indptr = d_qo.as<int32_t>();
  p.layout = PagedKvLayout{d_kv_indptr.as<int32_t>(), d_indices.as<int32_t>(), d_last.as<int32_t>(),
                           num_seqs, c.block_size};
  p.cache = kv_layout.layer_view(d_pool.data(), 1);
  p.qo_dtype = qo_dtype;
  p.num_qo_heads = num_qo_heads;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.window_left = c.window_left;
  p.max_q_len = max_q_len;
  const Status launched = detail::prefill_attention_variant(p, c.variant, nullptr);
  EXPECT_TRUE(launched.ok()) << launched.to_string();
  sync_device();
  auto o = download<uint16_t>(d_o, static_cast<size_t>(std::max(num_q, 1)) * o_stride);
  if (!c.check) return o;

  const PagedKvLayout host{kv_indptr.data(), indices.data(), last_len.data(), num_seqs,
                           c.block_size};
  const PagedKvCacheView cache = kv_layout.layer_view(const_cast<uint16_t*>(pool.data()), 1);
  const Tolerance tol = tolerance(Quantity::kPrefillOutput, qo_dtype);
  int64_t bad = 0;
  std::vector<double> sc, acc(d);
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t kv_len = host.kv_len(s);
    for (int32_t i = 0; i < c.seqs[s].q_len; ++i) {
      const int64_t row = qo_indptr[s] + i;
      const int32_t pos = kv_len - c.seqs[s].q_len + i;
      const int32_t lo = c.window_left >= 0 ? std::max(0, pos - c.window_left) : 0;
      for (int32_t h = 0; h < num_qo_heads; ++h) {
        const int32_t kvh = h / c.group_size;
        const std::vector<double> q_row = attention_query_row(q.data() + row * q_stride + h * d, d,
                                                              qo_dtype, c.dtype);
        sc.assign(static_cast<size_t>(pos - lo + 1), 0.0);
        double m = -INFINITY;
        for (int32_t t = lo; t <= pos; ++t) {
          const int32_t block = host.block_of(s, t);
          double dot = 0;
          for (int32_t e = 0; e < d; ++e) {
            dot += q_row[e] * kv_element(cache, false, block, kvh, t % c.block_size, e);
          }
          sc[t - lo] = dot * p.sm_scale;
          m = std::max(m, sc[t - lo]);
        }
        // (FP8 caches: the kernel multiplies Q's e4m3 codes by K's on the FP8 tensor cores and
        // converts V's codes exactly to fp16; INT8: codes converted as code x scale rounded once.
        // Both round P to fp16, as the 16-bit kernels round it to their dtype: the same
        // tolerance.)
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int32_t t = lo; t <= pos; ++t) {
          const int32_t block = host.block_of(s, t);
          for (int32_t e = 0; e < d; ++e) {
            acc[e] += sc[t - lo] * kv_element(cache, true, block, kvh, t % c.block_size, e);
          }
        }
        for (int32_t e = 0; e < d; ++e) {
          const double want = acc[e] / l;
          const double got = to_f32(o[row * o_stride + h * d + e], qo_dtype);
          if (!(std::abs(got - want) <= tol.atol + tol.rtol * std::abs(want)) && bad++ < 10) {
            ADD_FAILURE() << "seq " << s << " row " << i << " head " << h << " elem " << e
                          << ": got " << got << " want " << want;
          }
        }
      }
      for (int64_t e = static_cast<int64_t>(num_qo_heads) * d; e < o_stride; ++e) {
        if (o[row * o_stride + e] != 0xFFFFu && bad++ < 10) ADD_FAILURE() << "padding written";
      }
    }
  }
  EXPECT_EQ(bad, 0);
  return o;
}

class PrefillAttentionTest : public CudaTest {};

// Prompt chunks on cached prefixes, fresh prompts, decode tokens, and a sequence with no query
// rows, in one batch.
const std::vector<SeqShape> kMixedBatch = {{17, 17}, {97, 700}, {1, 33},   {64, 64},
                                           {1, 1},   {0, 5},    {130, 200}};

TEST_F(PrefillAttentionTest, SmallRaggedBatch) {
  PrefillCase c;
  c.seqs = {{17, 17}, {5, 40}, {1, 9}};
  run_prefill_case(c);
}

// Every dtype of `dtypes` x head dim of `head_dims` x block size on the mixed batch.
void sweep(std::span<const DType> dtypes, std::span<const int32_t> head_dims, uint64_t seed) {
  for (DType dtype : dtypes) {
    for (int32_t hd : head_dims) {
      for (int32_t bs : kKvBlockSizes) {
        PrefillCase c;
        c.dtype = dtype;
        c.head_dim = hd;
        c.block_size = bs;
        c.seqs = kMixedBatch;
        c.seed = seed++;
        run_prefill_case(c);
      }
    }
  }
}

TEST_F(PrefillAttentionTest, SweepDTypeHeadDimBlockSize) {
  sweep(kKvDTypes, kPrefillHeadDims, 500);
}

// Quantized caches (FP8 E4M3 / E5M2, INT8) with BF16 queries: the sweep, and windows whose start
// is not a multiple of 8.
TEST_F(PrefillAttentionTest, SweepQuantizedDTypeHeadDimBlockSize) {
  sweep(kQuantizedKvDTypes, kQuantizedKvHeadDims, 800);
  uint64_t seed = 850;
  for (DType dtype : kQuantizedKvDTypes) {
    for (int32_t window : {0, 13, 100}) {
      PrefillCase c;
      c.dtype = dtype;
      c.group_size = 4;
      c.num_kv_heads = 1;
      c.block_size = 8;
      c.seqs = {{97, 150}, {40, 40}, {1, 77}, {300, 1300}};
      c.window_left = window;
      c.seed = seed++;
      run_prefill_case(c);
    }
  }
}

TEST_F(PrefillAttentionTest, GroupSizesAndSlidingWindow) {
  // Groups 3, 6, 12, 16 pack 1, 2, 4, 8 query heads per block with several head tiles.
  for (int32_t group : {1, 3, 4, 6, 8, 12, 16}) {
    for (int32_t window : {-1, 0, 31, 100}) {
      PrefillCase c;
      c.group_size = group;
      c.num_kv_heads = 1;
      c.seqs = {{97, 150}, {40, 40}, {1, 77}};
      c.window_left = window;
      c.seed = 600 + group * 7 + window;
      run_prefill_case(c);
    }
  }
}

// Chunks of several row tiles on long cached prefixes (many K/V tiles, the longest-first order),
// a group of 4 heads, with and without a window.
TEST_F(PrefillAttentionTest, LongChunksOnCachedPrefixes) {
  for (int32_t window : {-1, 300}) {
    PrefillCase c;
    c.group_size = 4;
    c.seqs = {{300, 1300}, {1, 1000}, {129, 129}};
    c.window_left = window;
    c.seed = 700 + window;
    run_prefill_case(c);
  }
}

TEST_F(PrefillAttentionTest, Prompt2049Tokens) {
  PrefillCase c;
  c.num_kv_heads = 1;
  c.seqs = {{2049, 2049}};
  run_prefill_case(c);
}

// Every schedule on batches whose blocks have very different tile counts: a long prompt beside
// decode tokens on long prefixes and short chunks (blocks of 1 to 17 K/V tiles, sequences of
// different query-tile counts, so the longest-first order interleaves them), with and without
// windows, one and several head tiles, 16-bit and 8-bit caches. Each against the reference, and
// every schedule's output bit for bit the first's (they differ only in order and overlap).
TEST_F(PrefillAttentionTest, SchedulesAgreeBitForBit) {
  const std::vector<SeqShape> seqs = {{1, 2100}, {400, 400}, {33, 1500}, {1, 1},
                                      {0, 40},   {150, 150}, {97, 2000}};
  uint64_t seed = 900;
  for (DType dtype : {DType::kBF16, DType::kF8E4M3, DType::kI8}) {
    for (int32_t window : {-1, 200}) {
      for (int32_t group : {4, 16}) {
        PrefillCase c;
        c.dtype = dtype;
        c.num_kv_heads = group == 4 ? 2 : 1;  // 8 or 16 query heads, 1 or 2 head tiles
        c.group_size = group;
        c.block_size = dtype == DType::kBF16 ? 16 : 32;
        c.seqs = seqs;
        c.window_left = window;
        c.seed = seed++;
        std::vector<uint16_t> first;
        for (detail::PrefillWsVariant v : detail::kPrefillWsVariants) {
          c.variant = v;
          c.check = first.empty();  // the others must equal it
          std::vector<uint16_t> o = run_prefill_case(c);
          if (first.empty()) {
            first = std::move(o);
          } else {
            EXPECT_TRUE(o == first)
                << detail::prefill_ws_variant_name(v) << " differs from "
                << detail::prefill_ws_variant_name(detail::kPrefillWsVariants[0]) << ": "
                << dtype_name(dtype) << " window " << window << " group " << group;
          }
        }
      }
    }
  }
}

// Head dim 256 (Gemma 3), which runs the mma.sync kernel over the whole key range (128 query
// rows, 64-key tiles, Q from shared memory): Gemma's group sizes (2 for 4B and 12B) and others
// that pack several heads per block, Gemma's sliding window shapes (a window shorter and longer
// than a K/V tile, one not a multiple of 8), long chunks on cached prefixes and a 2049-token
// prompt, both 16-bit dtypes and the smallest and largest block sizes.
TEST_F(PrefillAttentionTest, HeadDim256GroupsWindowsAndLongChunks) {
  uint64_t seed = 1000;
  for (DType dtype : kKvDTypes) {
    for (int32_t group : {1, 2, 4, 8}) {
      for (int32_t window : {-1, 0, 13, 63, 100}) {
        PrefillCase c;
        c.dtype = dtype;
        c.head_dim = 256;
        c.group_size = group;
        c.num_kv_heads = group == 1 ? 2 : 1;
        c.block_size = group % 4 == 0 ? 8 : 128;
        c.seqs = {{97, 150}, {40, 40}, {1, 77}, {130, 300}, {0, 9}};
        c.window_left = window;
        c.seed = seed++;
        run_prefill_case(c);
      }
    }
  }
  for (int32_t window : {-1, 511}) {
    PrefillCase c;
    c.head_dim = 256;
    c.group_size = 2;
    c.seqs = {{300, 1300}, {1, 1000}, {129, 129}};
    c.window_left = window;
    c.seed = seed++;
    run_prefill_case(c);
  }
  PrefillCase c;
  c.head_dim = 256;
  c.num_kv_heads = 1;
  c.seqs = {{2049, 2049}};
  c.seed = seed++;
  run_prefill_case(c);
}

// Every schedule name runs the one head-dim-256 kernel: the same bits.
TEST_F(PrefillAttentionTest, HeadDim256SchedulesAgree) {
  PrefillCase c;
  c.head_dim = 256;
  c.group_size = 2;
  c.seqs = {{1, 700}, {150, 150}, {33, 500}};
  c.window_left = 200;
  c.seed = 1100;
  std::vector<uint16_t> first;
  for (detail::PrefillWsVariant v : detail::kPrefillWsVariants) {
    c.variant = v;
    c.check = first.empty();
    std::vector<uint16_t> o = run_prefill_case(c);
    if (first.empty()) {
      first = std::move(o);
    } else {
      EXPECT_TRUE(o == first) << detail::prefill_ws_variant_name(v);
    }
  }
}

TEST(PrefillAttentionDispatchTest, UnsupportedHeadDimReturnsStatus) {
  alignas(16) static int32_t fake[64] = {};
  PrefillAttentionParams p;
  p.q = p.o = fake;
  p.qo_indptr = fake;
  p.layout = PagedKvLayout{fake, fake, fake, 1, 16};
  p.cache.k_data = p.cache.v_data = fake;
  p.cache.num_kv_heads = 1;
  p.cache.head_dim = 96;
  p.cache.block_size = 16;
  p.cache.token_stride = 96;
  p.cache.head_stride = p.cache.block_stride = 16 * 96;
  p.cache.dtype = DType::kBF16;
  p.num_qo_heads = 1;
  p.q_token_stride = p.o_token_stride = 96;
  p.max_q_len = 1;
  EXPECT_EQ(prefill_attention(p, nullptr).code(), StatusCode::kUnsupported);
}

// Quantized caches have no head-dim-256 instance: Unsupported, not a launch.
TEST(PrefillAttentionDispatchTest, QuantizedCacheAtHeadDim256ReturnsUnsupported) {
  alignas(16) static int32_t fake[64] = {};
  PrefillAttentionParams p;
  p.q = p.o = fake;
  p.qo_indptr = fake;
  p.layout = PagedKvLayout{fake, fake, fake, 1, 16};
  p.cache.k_data = p.cache.v_data = fake;
  p.cache.num_kv_heads = 1;
  p.cache.head_dim = 256;
  p.cache.block_size = 16;
  p.cache.token_stride = 256;
  p.cache.head_stride = p.cache.block_stride = 16 * 256;
  p.cache.dtype = DType::kF8E4M3;
  p.cache.k_scale = p.cache.v_scale = 1.0f;
  p.qo_dtype = DType::kBF16;
  p.num_qo_heads = 1;
  p.q_token_stride = p.o_token_stride = 256;
  p.max_q_len = 1;
  EXPECT_EQ(prefill_attention(p, nullptr).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace strata::cuda::testing

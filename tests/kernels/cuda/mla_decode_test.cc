// Paged MLA decode attention against a double-precision host reference: head counts on both
// tile paths (64-head tiles: 64, 128; 16-head tiles: 16, 48, 112), block sizes 8..64 with blocks
// in random order, ragged batches with odd lengths (0, 1, 17, 97, 2049), split and unsplit, a
// padded latent row stride, and the log-sum-exp. Outputs are poisoned before each launch; every
// element, and the padding between sequences, is checked. On a mismatch the test prints the
// first wrong (sequence, head, channel) with the expected and actual values and how many are
// wrong; STRATA_MLA_TEST_VERBOSE=1 prints each case's largest error even when it passes.

#include "kernels/cuda/mla_decode.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/decode_attention.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

constexpr int32_t kD = kMlaLatentDim;  // 576
constexpr int32_t kDv = kMlaValueDim;  // 512

struct MlaCase {
  int32_t num_heads = 16;
  int32_t block_size = 16;
  std::vector<int32_t> kv_lens;
  int32_t num_splits = 0;  // 0 = planner
  int32_t token_pad = 0;   // elements of padding after each 576-wide latent row
  float sm_scale = 0.1f;
  uint64_t seed = 1;
};

std::string describe(const MlaCase& c) {
  std::string lens;
  for (int32_t l : c.kv_lens) lens += std::to_string(l) + ",";
  return "heads " + std::to_string(c.num_heads) + " bs " + std::to_string(c.block_size) + " lens[" +
         lens + "] splits " + std::to_string(c.num_splits) + " token_pad " +
         std::to_string(c.token_pad);
}

bool verbose() {
  const char* v = std::getenv("STRATA_MLA_TEST_VERBOSE");
  return v != nullptr && v[0] == '1';
}

// The latent of one layer in a pool of two: block b holds layer 0's then layer 1's block_size
// rows of token_stride elements, so the kernel (which reads layer 1) sees a block stride of two
// layers' rows and, with token_pad, rows wider than 576.
struct LatentPool {
  std::vector<uint16_t> data;
  int64_t token_stride = 0;
  int64_t block_stride = 0;
  int64_t layer_offset = 0;  // elements from the pool's start to layer 1 of block 0
};

LatentPool make_pool(const MlaCase& c, int32_t num_blocks, std::mt19937_64& rng) {
  LatentPool p;
  p.token_stride = kD + c.token_pad;
  p.block_stride = 2 * c.block_size * p.token_stride;
  p.layer_offset = c.block_size * p.token_stride;
  p.data = random_halves(static_cast<size_t>(num_blocks) * p.block_stride, DType::kBF16, -1.0f,
                         1.0f, rng);
  return p;
}

void run_case(const MlaCase& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(c.seed);
  const int32_t num_seqs = static_cast<int32_t>(c.kv_lens.size());
  const int32_t h = c.num_heads;

  // Block tables: distinct random block ids from a pool with a null block and spare blocks.
  std::vector<int32_t> indptr{0};
  std::vector<int32_t> last_len;
  int32_t needed = 0;
  for (int32_t len : c.kv_lens) {
    const int32_t blocks = (len + c.block_size - 1) / c.block_size;
    needed += blocks;
    indptr.push_back(indptr.back() + blocks);
    last_len.push_back(blocks == 0 ? 0 : len - (blocks - 1) * c.block_size);
  }
  const int32_t num_pool_blocks = needed + 5;
  std::vector<int32_t> ids(num_pool_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  const std::vector<int32_t> indices(ids.begin(), ids.begin() + needed);

  const LatentPool pool = make_pool(c, num_pool_blocks, rng);
  const int64_t q_seq_stride = static_cast<int64_t>(h) * kD + 8;
  const int64_t o_seq_stride = static_cast<int64_t>(h) * kDv + 16;
  const std::vector<uint16_t> q =
      random_halves(static_cast<size_t>(num_seqs) * q_seq_stride, DType::kBF16, -3.0f, 3.0f, rng);

  DeviceBuffer d_pool = upload(pool.data);
  DeviceBuffer d_q = upload(q);
  DeviceBuffer d_indptr = upload(indptr);
  DeviceBuffer d_indices = upload(indices.empty() ? std::vector<int32_t>{0} : indices);
  DeviceBuffer d_last = upload(last_len.empty() ? std::vector<int32_t>{0} : last_len);
  DeviceBuffer d_o =
      upload(std::vector<uint16_t>(static_cast<size_t>(num_seqs) * o_seq_stride, 0xFFFFu));
  DeviceBuffer d_lse = upload(std::vector<float>(static_cast<size_t>(num_seqs) * h, NAN));
  auto ws = DeviceBuffer::allocate(mla_decode_workspace_bytes(num_seqs, h, kMaxDecodeSplits));
  ASSERT_TRUE(ws.ok());
  ASSERT_EQ(cudaMemset(ws->data(), 0, ws->bytes()), cudaSuccess);  // the merge counters

  MlaDecodeParams p;
  p.q = d_q.data();
  p.q_seq_stride = q_seq_stride;
  p.o = d_o.data();
  p.o_seq_stride = o_seq_stride;
  p.layout = PagedKvLayout{d_indptr.as<int32_t>(), d_indices.as<int32_t>(), d_last.as<int32_t>(),
                           num_seqs, c.block_size};
  p.cache.k_data = d_pool.as<uint16_t>() + pool.layer_offset;
  p.cache.v_data = p.cache.k_data;
  p.cache.block_stride = pool.block_stride;
  p.cache.head_stride = c.block_size * pool.token_stride;
  p.cache.token_stride = pool.token_stride;
  p.cache.num_kv_heads = 1;
  p.cache.head_dim = kD;
  p.cache.block_size = c.block_size;
  p.cache.dtype = DType::kBF16;
  p.num_heads = h;
  p.sm_scale = c.sm_scale;
  p.max_kv_len = num_seqs == 0 ? 0 : *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
  p.num_splits = c.num_splits;
  p.lse = d_lse.as<float>();
  p.workspace = ws->data();
  p.workspace_bytes = ws->bytes();
  STRATA_ASSERT_OK(mla_decode(p, nullptr));
  sync_device();
  const auto counters = download<int32_t>(*ws, 4096);
  EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), 4096)
      << "split merge counters not left at zero";

  const auto o = download<uint16_t>(d_o, static_cast<size_t>(num_seqs) * o_seq_stride);
  const auto lse = download<float>(d_lse, static_cast<size_t>(num_seqs) * h);
  const Tolerance tol = tolerance(Quantity::kAttentionOutput, DType::kBF16);
  const Tolerance lse_tol = tolerance(Quantity::kLogSumExp, DType::kBF16);

  // The reference, in doubles from the bf16 values: latent row j of sequence s.
  auto latent_row = [&](int32_t s, int32_t j) {
    const int32_t block = indices[indptr[s] + j / c.block_size];
    return pool.data.data() + block * pool.block_stride + pool.layer_offset +
           (j % c.block_size) * pool.token_stride;
  };
  int64_t bad = 0;
  int64_t bad_lse = 0;
  double max_err = 0.0;
  std::string first_bad;
  std::vector<double> scores;
  std::vector<double> out(kDv);
  std::vector<double> lat;
  std::vector<double> qf(kD);
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t len = c.kv_lens[s];
    scores.assign(len, 0.0);
    lat.resize(static_cast<size_t>(len) * kD);
    for (int32_t j = 0; j < len; ++j) {
      const uint16_t* row = latent_row(s, j);
      for (int32_t e = 0; e < kD; ++e)
        lat[static_cast<size_t>(j) * kD + e] = to_f32(row[e], DType::kBF16);
    }
    for (int32_t hh = 0; hh < h; ++hh) {
      const uint16_t* qrow = q.data() + s * q_seq_stride + static_cast<int64_t>(hh) * kD;
      for (int32_t e = 0; e < kD; ++e) qf[e] = to_f32(qrow[e], DType::kBF16);
      double m = -INFINITY;
      for (int32_t j = 0; j < len; ++j) {
        const double* row = lat.data() + static_cast<size_t>(j) * kD;
        double dot = 0.0;
        for (int32_t e = 0; e < kD; ++e) dot += qf[e] * row[e];
        scores[j] = dot * c.sm_scale;
        m = std::max(m, scores[j]);
      }
      double sum = 0.0;
      std::fill(out.begin(), out.end(), 0.0);
      for (int32_t j = 0; j < len; ++j) {
        const double w = std::exp(scores[j] - m);
        sum += w;
        const double* row = lat.data() + static_cast<size_t>(j) * kD;
        for (int32_t e = 0; e < kDv; ++e) out[e] += w * row[e];
      }
      for (int32_t e = 0; e < kDv; ++e) {
        const double want = sum > 0.0 ? out[e] / sum : 0.0;
        const uint16_t bits = o[s * o_seq_stride + static_cast<int64_t>(hh) * kDv + e];
        const double got = bits == 0xFFFFu ? NAN : to_f32(bits, DType::kBF16);
        const double err = std::abs(got - want);
        max_err = std::max(max_err, std::isnan(err) ? INFINITY : err);
        if (!(err <= tol.atol + tol.rtol * std::abs(want))) {
          if (bad == 0) {
            char buf[256];
            std::snprintf(buf, sizeof(buf),
                          "first mismatch: seq %d head %d channel %d expected %.6f actual %.6f%s",
                          s, hh, e, want, got, bits == 0xFFFFu ? " (never written)" : "");
            first_bad = buf;
          }
          ++bad;
        }
      }
      const double want_lse = sum > 0.0 ? m + std::log(sum) : -INFINITY;
      const double got_lse = lse[static_cast<size_t>(s) * h + hh];
      // Plus the FP32 accumulation of 576 products of |q| < 3, |c| < 1 (2^-21 each, scaled).
      const double lse_bound = lse_tol.atol + lse_tol.rtol * std::abs(want_lse) +
                               c.sm_scale * kD * 3.0 * std::ldexp(1.0, -21);
      const bool lse_ok = std::isinf(want_lse) ? (std::isinf(got_lse) && got_lse < 0)
                                               : std::abs(got_lse - want_lse) <= lse_bound;
      if (!lse_ok) {
        if (bad_lse == 0) {
          std::fprintf(stderr, "  first lse mismatch: seq %d head %d expected %.6f actual %.6f\n",
                       s, hh, want_lse, got_lse);
        }
        ++bad_lse;
      }
    }
    // The padding after the sequence's heads is never written.
    for (int64_t e = static_cast<int64_t>(h) * kDv; e < o_seq_stride; ++e) {
      ASSERT_EQ(o[s * o_seq_stride + e], 0xFFFFu) << "seq " << s << " wrote past its heads";
    }
  }
  if (verbose() || bad > 0) {
    std::fprintf(stderr, "  [%s] max |err| %.3g, %lld of %lld outputs wrong%s%s\n",
                 describe(c).c_str(), max_err, static_cast<long long>(bad),
                 static_cast<long long>(num_seqs) * h * kDv, bad > 0 ? "; " : "",
                 first_bad.c_str());
  }
  EXPECT_EQ(bad, 0) << first_bad;
  EXPECT_EQ(bad_lse, 0);
}

class MlaDecodeTest : public CudaTest {};

TEST_F(MlaDecodeTest, SixteenHeadTilesMatchReference) {
  for (int32_t heads : {16, 48, 112}) {
    for (int32_t bs : {16, 32, 64}) {
      run_case({.num_heads = heads, .block_size = bs, .kv_lens = {1, 17, 97, 0, 300}});
    }
  }
}

TEST_F(MlaDecodeTest, SixtyFourHeadTilesMatchReference) {
  for (int32_t heads : {64, 128}) {
    for (int32_t bs : {16, 32, 64}) {
      run_case({.num_heads = heads, .block_size = bs, .kv_lens = {97, 1, 0, 17, 250}});
    }
  }
}

TEST_F(MlaDecodeTest, OddLengthsUnsplitAndSplit) {
  for (int32_t heads : {16, 128}) {
    for (int32_t splits : {1, 3, 7}) {
      run_case({.num_heads = heads,
                .block_size = 16,
                .kv_lens = {2049, 1, 97},
                .num_splits = splits,
                .seed = 7});
    }
  }
}

TEST_F(MlaDecodeTest, PlannerSplitsALongContext) {
  run_case({.num_heads = 128, .block_size = 64, .kv_lens = {8191, 300}, .seed = 3});
  run_case({.num_heads = 16, .block_size = 32, .kv_lens = {8192}, .seed = 4});
}

TEST_F(MlaDecodeTest, BothMergePaths) {
  // Splits x tile heads <= 128: the last split merges in the attention kernel; above, the merge
  // kernel does. Each tile height on both sides (1700 tokens: 27 tiles of 64, so 9 splits stay 9).
  for (int32_t heads : {64, 128}) {
    for (int32_t splits : {2, 3}) {
      run_case({.num_heads = heads,
                .block_size = 32,
                .kv_lens = {700, 3, 64},
                .num_splits = splits,
                .seed = 13});
    }
  }
  for (int32_t splits : {8, 9}) {
    run_case({.num_heads = 16,
              .block_size = 32,
              .kv_lens = {1700, 3, 64},
              .num_splits = splits,
              .seed = 14});
  }
}

TEST_F(MlaDecodeTest, ManySplitsWithShortSequences) {
  // Splits that are empty for the shorter sequences write -inf partials the merge skips.
  run_case({.num_heads = 64,
            .block_size = 16,
            .kv_lens = {1000, 5, 33, 0},
            .num_splits = 16,
            .seed = 5});
  run_case(
      {.num_heads = 32, .block_size = 8, .kv_lens = {1000, 5, 33, 0}, .num_splits = 16, .seed = 6});
}

TEST_F(MlaDecodeTest, PaddedLatentRowsAndSmallBlocks) {
  run_case({.num_heads = 128, .block_size = 8, .kv_lens = {77, 130}, .token_pad = 8, .seed = 9});
  run_case({.num_heads = 16, .block_size = 128, .kv_lens = {77, 300}, .token_pad = 64, .seed = 10});
}

TEST_F(MlaDecodeTest, SharpSoftmax) {
  // Large scores: one token dominates each head, so any misplaced row or channel shows.
  run_case(
      {.num_heads = 128, .block_size = 32, .kv_lens = {500, 63}, .sm_scale = 0.5f, .seed = 11});
  run_case({.num_heads = 16,
            .block_size = 32,
            .kv_lens = {500, 63},
            .num_splits = 4,
            .sm_scale = 0.5f,
            .seed = 12});
}

// Validation needs no device: these return before any CUDA call.
TEST(MlaDecodeValidationTest, RefusesUnsupportedShapes) {
  MlaDecodeParams p;
  alignas(16) static uint16_t dummy[64];
  p.q = dummy;
  p.o = dummy;
  static int32_t table[4] = {0, 0, 0, 0};
  p.layout = PagedKvLayout{table, table, table, 1, 16};
  p.cache.k_data = dummy;
  p.cache.v_data = dummy;
  p.cache.num_kv_heads = 1;
  p.cache.head_dim = kD;
  p.cache.block_size = 16;
  p.cache.token_stride = kD;
  p.cache.block_stride = 16 * kD;
  p.cache.dtype = DType::kBF16;
  p.q_seq_stride = 128 * kD;
  p.o_seq_stride = 128 * kDv;
  for (int32_t heads : {0, 8, 24, 144}) {
    p.num_heads = heads;
    EXPECT_FALSE(mla_decode(p, nullptr).ok()) << heads;
  }
  p.num_heads = 16;
  MlaDecodeParams f16 = p;
  f16.cache.dtype = DType::kF16;
  EXPECT_FALSE(mla_decode(f16, nullptr).ok());
  MlaDecodeParams narrow = p;
  narrow.cache.head_dim = 512;
  EXPECT_FALSE(mla_decode(narrow, nullptr).ok());
  MlaDecodeParams bs = p;
  bs.cache.block_size = bs.layout.block_size = 12;
  EXPECT_FALSE(mla_decode(bs, nullptr).ok());
  MlaDecodeParams stride = p;
  stride.q_seq_stride = 16 * kD - 8;
  EXPECT_FALSE(mla_decode(stride, nullptr).ok());
}

}  // namespace
}  // namespace strata::cuda::testing

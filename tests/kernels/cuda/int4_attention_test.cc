// INT4 (KIVI) on the GPU (docs/kv-quant.md "INT4"): the append's block quantization against the
// CPU encoder, byte for byte; decode and prefill attention against a float64 reference that
// applies the newest-blocks rule itself (a query at position p reads logical block jb from the
// full-precision pool of the newest-blocks group iff jb > p / B - R, else the decoded int4
// block), over random codes, statistics and newest blocks, so a block read from the wrong pool
// shows.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/prefill_attention.h"
#include "kv_test_pool.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

// An INT4 pool of random codes and statistics (scales 0.02-0.2, zero points -1.5-0: values in
// about [-1.5, 1.5]).
std::vector<uint16_t> random_int4_pool(const kv::KvLayout& layout, int32_t num_blocks,
                                       std::mt19937_64& rng) {
  std::vector<uint16_t> pool(static_cast<size_t>(layout.pool_bytes(num_blocks)) / 2);
  auto* bytes = reinterpret_cast<uint8_t*>(pool.data());
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < pool.size() * 2; ++i) bytes[i] = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.02f, 0.2f);
  std::uniform_real_distribution<float> zero(-1.5f, 0.0f);
  const kv::KvSpec& spec = layout.spec();
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    const PagedKvCacheView c = layout.layer_view(pool.data(), l);
    for (int32_t b = 0; b < num_blocks; ++b) {
      for (int32_t h = 0; h < c.num_kv_heads; ++h) {
        for (int32_t e = 0; e < c.head_dim; ++e) {
          const int64_t at = b * c.scale_block_stride + h * c.k_stat_head_stride + e;
          static_cast<uint16_t*>(c.k_scale_data)[at] = f32_to_f16(scale(rng));
          static_cast<uint16_t*>(c.k_zero_data)[at] = f32_to_f16(zero(rng));
        }
        for (int32_t t = 0; t < c.block_size; ++t) {
          const int64_t at = c.scale_offset(b, h, t);
          static_cast<uint16_t*>(c.v_scale_data)[at] = f32_to_f16(scale(rng));
          static_cast<uint16_t*>(c.v_zero_data)[at] = f32_to_f16(zero(rng));
        }
      }
    }
  }
  return pool;
}

// Channel e of K (v = false) or V at (block, head, token) of a host INT4 view: code * s + z, an
// fp32 multiply then an fp32 add (the CPU's int4_value).
double int4_element(const PagedKvCacheView& c, bool v, int32_t block, int32_t h, int32_t t,
                    int32_t e) {
  const auto* codes = static_cast<const uint8_t*>(v ? c.v_data : c.k_data);
  const uint8_t code = (codes[c.offset(block, h, t) + e / 2] >> (4 * (e & 1))) & 0x0fu;
  const auto* scales = static_cast<const uint16_t*>(v ? c.v_scale_data : c.k_scale_data);
  const auto* zeros = static_cast<const uint16_t*>(v ? c.v_zero_data : c.k_zero_data);
  const int64_t at = v ? c.scale_offset(block, h, t)
                       : block * c.scale_block_stride + h * c.k_stat_head_stride + e;
  return cpu::int4_value(code, f16_to_f32(scales[at]), f16_to_f32(zeros[at]));
}

struct Int4Case {
  int32_t head_dim = 128;
  int32_t block_size = 16;
  int32_t num_kv_heads = 2;
  int32_t group_size = 4;
  int32_t newest_blocks = 1;  // R
  std::vector<int32_t> kv_lens;
  std::vector<int32_t> q_lens;  // empty = decode (one query token per sequence)
  int32_t window_left = -1;
  int32_t num_splits = 0;
  bool extra_newest = false;  // tables start a block earlier than needed where they can
  uint64_t seed = 1;
};

std::string describe(const Int4Case& c) {
  std::string lens;
  for (size_t i = 0; i < c.kv_lens.size(); ++i) {
    lens += std::to_string(c.q_lens.empty() ? 1 : c.q_lens[i]) + "/" +
            std::to_string(c.kv_lens[i]) + ",";
  }
  return "hd" + std::to_string(c.head_dim) + " bs" + std::to_string(c.block_size) + " kvh" +
         std::to_string(c.num_kv_heads) + " g" + std::to_string(c.group_size) + " R" +
         std::to_string(c.newest_blocks) + " q/kv[" + lens + "] window " +
         std::to_string(c.window_left) + " splits " + std::to_string(c.num_splits) +
         (c.extra_newest ? " extra" : "");
}

// Runs decode (q_lens empty) or prefill attention over an INT4 cache and its newest blocks and
// checks every output element against the float64 reference.
void run_int4_case(const Int4Case& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(c.seed);
  const bool decode = c.q_lens.empty();
  const auto num_seqs = static_cast<int32_t>(c.kv_lens.size());
  const int32_t d = c.head_dim;
  const int32_t bs = c.block_size;
  const int32_t r = c.newest_blocks;
  const int32_t num_qo_heads = c.num_kv_heads * c.group_size;
  auto q_len = [&](int32_t s) { return decode ? 1 : c.q_lens[static_cast<size_t>(s)]; };

  // Block tables of both pools: distinct random ids, block 0 never used.
  std::vector<int32_t> indptr{0}, last_len, newest_indptr{0}, newest_first, q_indptr{0};
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t len = c.kv_lens[static_cast<size_t>(s)];
    const int32_t blocks = (len + bs - 1) / bs;
    indptr.push_back(indptr.back() + blocks);
    last_len.push_back(len - (blocks - 1) * bs);
    const int32_t first_pos = len - q_len(s);
    int32_t first = std::max(0, first_pos / bs - r + 1);
    if (c.extra_newest && first > 0) --first;
    newest_first.push_back(first);
    newest_indptr.push_back(newest_indptr.back() + blocks - first);
    q_indptr.push_back(q_indptr.back() + q_len(s));
  }
  auto shuffled_ids = [&](int32_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n) + 3);
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(static_cast<size_t>(n));
    return ids;
  };
  const std::vector<int32_t> indices = shuffled_ids(indptr.back());
  const std::vector<int32_t> newest_indices = shuffled_ids(newest_indptr.back());
  const int32_t pool_blocks = indptr.back() + 4;
  const int32_t newest_pool_blocks = newest_indptr.back() + 4;

  const kv::KvLayout layout = test_kv_layout(DType::kI4, 2, c.num_kv_heads, d, bs);
  const kv::KvLayout newest_layout = test_kv_layout(DType::kBF16, 2, c.num_kv_heads, d, bs);
  const std::vector<uint16_t> pool = random_int4_pool(layout, pool_blocks, rng);
  const std::vector<uint16_t> newest_pool = random_kv_pool(newest_layout, newest_pool_blocks, rng);
  const int32_t rows = q_indptr.back();
  const int64_t q_stride = static_cast<int64_t>(num_qo_heads) * d + 8;
  const int64_t o_stride = static_cast<int64_t>(num_qo_heads) * d + 16;
  const std::vector<uint16_t> q =
      random_halves(static_cast<size_t>(rows) * q_stride, DType::kBF16, -3.0f, 3.0f, rng);

  DeviceBuffer d_pool = upload(pool);
  DeviceBuffer d_newest_pool = upload(newest_pool);
  DeviceBuffer d_q = upload(q);
  DeviceBuffer d_o = upload(std::vector<uint16_t>(static_cast<size_t>(rows) * o_stride, 0xFFFFu));
  DeviceBuffer d_indptr = upload(indptr);
  DeviceBuffer d_indices = upload(indices);
  DeviceBuffer d_last = upload(last_len);
  DeviceBuffer d_newest_indptr = upload(newest_indptr);
  DeviceBuffer d_newest_indices = upload(newest_indices);
  DeviceBuffer d_newest_first = upload(newest_first);
  DeviceBuffer d_q_indptr = upload(q_indptr);
  PagedKvLayout dl{d_indptr.as<int32_t>(), d_indices.as<int32_t>(), d_last.as<int32_t>(),
                   num_seqs, bs};
  // The newest-blocks group: its own block ids, first blocks and (group 0's) last-block lengths.
  NewestBlocksView newest;
  newest.cache = newest_layout.layer_view(d_newest_pool.data(), 1);
  newest.layout = PagedKvLayout{d_newest_indptr.as<int32_t>(), d_newest_indices.as<int32_t>(),
                                d_last.as<int32_t>(), num_seqs, bs};
  newest.layout.first_block = d_newest_first.as<int32_t>();
  newest.blocks = r;
  const PagedKvCacheView cache = layout.layer_view(d_pool.data(), 1);
  const float sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
  if (decode) {
    auto ws = DeviceBuffer::allocate(
        decode_attention_workspace_bytes(num_seqs, num_qo_heads, d, kMaxDecodeSplits));
    ASSERT_TRUE(ws.ok());
    ASSERT_EQ(cudaMemset(ws->data(), 0, ws->bytes()), cudaSuccess);
    DecodeAttentionParams p;
    p.q = d_q.data();
    p.q_seq_stride = q_stride;
    p.o = d_o.data();
    p.o_seq_stride = o_stride;
    p.layout = dl;
    p.cache = cache;
    p.newest = newest;
    p.num_qo_heads = num_qo_heads;
    p.sm_scale = sm_scale;
    p.window_left = c.window_left;
    p.max_kv_len = *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
    p.num_splits = c.num_splits;
    p.workspace = ws->data();
    p.workspace_bytes = ws->bytes();
    STRATA_ASSERT_OK(decode_attention(p, nullptr));
    sync_device();
    const auto counters = download<int32_t>(*ws, 4096);
    EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), 4096);
  } else {
    DeviceBuffer d_lse = upload(std::vector<float>(
        static_cast<size_t>(prefill_int4_workspace_floats(rows, num_qo_heads)), NAN));
    PrefillAttentionParams p;
    p.q = d_q.data();
    p.q_token_stride = q_stride;
    p.o = d_o.data();
    p.o_token_stride = o_stride;
    p.qo_indptr = d_q_indptr.as<int32_t>();
    p.layout = dl;
    p.cache = cache;
    p.newest = newest;
    p.lse_workspace = d_lse.as<float>();
    p.num_qo_heads = num_qo_heads;
    p.sm_scale = sm_scale;
    p.window_left = c.window_left;
    p.max_q_len = *std::max_element(c.q_lens.begin(), c.q_lens.end());
    STRATA_ASSERT_OK(prefill_attention(p, nullptr));
    sync_device();
  }

  // The reference, per query row: key t of block jb = t / B from the newest blocks iff
  // jb > p / B - R.
  const PagedKvCacheView host = layout.layer_view(const_cast<uint16_t*>(pool.data()), 1);
  const PagedKvCacheView host_newest =
      newest_layout.layer_view(const_cast<uint16_t*>(newest_pool.data()), 1);
  const auto o = download<uint16_t>(d_o, static_cast<size_t>(rows) * o_stride);
  const Tolerance tol = tolerance(Quantity::kAttentionOutput, DType::kBF16);
  int64_t bad = 0;
  std::vector<double> scores, acc(static_cast<size_t>(d));
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t len = c.kv_lens[static_cast<size_t>(s)];
    for (int32_t i = 0; i < q_len(s); ++i) {
      const int32_t pos = len - q_len(s) + i;
      const int32_t row = q_indptr[static_cast<size_t>(s)] + i;
      const int32_t begin = c.window_left >= 0 ? std::max(0, pos - c.window_left) : 0;
      auto element = [&](bool v, int32_t t, int32_t h, int32_t e) {
        const int32_t jb = t / bs;
        if (jb > pos / bs - r) {
          const int32_t blk =
              newest_indices[static_cast<size_t>(newest_indptr[s] + jb - newest_first[s])];
          return kv_element(host_newest, v, blk, h, t % bs, e);
        }
        return int4_element(host, v, indices[static_cast<size_t>(indptr[s] + jb)], h, t % bs, e);
      };
      for (int32_t qh = 0; qh < num_qo_heads; ++qh) {
        const int32_t h = qh / c.group_size;
        scores.assign(static_cast<size_t>(pos + 1 - begin), 0.0);
        double m = -std::numeric_limits<double>::infinity();
        for (int32_t t = begin; t <= pos; ++t) {
          double dot = 0.0;
          for (int32_t e = 0; e < d; ++e) {
            dot += to_f32(q[row * q_stride + qh * d + e], DType::kBF16) * element(false, t, h, e);
          }
          scores[static_cast<size_t>(t - begin)] = dot * sm_scale;
          m = std::max(m, dot * sm_scale);
        }
        double l = 0.0;
        for (double& x : scores) l += (x = std::exp(x - m));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int32_t t = begin; t <= pos; ++t) {
          const double pr = scores[static_cast<size_t>(t - begin)] / l;
          for (int32_t e = 0; e < d; ++e) acc[static_cast<size_t>(e)] += pr * element(true, t, h, e);
        }
        for (int32_t e = 0; e < d; ++e) {
          const double want = acc[static_cast<size_t>(e)];
          const double got = to_f32(o[row * o_stride + qh * d + e], DType::kBF16);
          if (!(std::abs(got - want) <= tol.atol + tol.rtol * std::abs(want)) && bad++ < 10) {
            ADD_FAILURE() << "row " << row << " (pos " << pos << ") head " << qh << " elem " << e
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
}

class Int4AttentionTest : public CudaTest {};

TEST_F(Int4AttentionTest, SmallDecodeNewestBlocksWindows) {
  uint64_t seed = 1;
  for (int32_t r : {1, 2, 3}) {
    for (int32_t splits : {1, 3, 0}) {
      Int4Case c;
      c.newest_blocks = r;
      c.kv_lens = {1, 16, 17, 47, 97, 300};
      c.num_splits = splits;
      c.extra_newest = splits == 3;
      c.seed = seed++;
      run_int4_case(c);
    }
  }
}

TEST_F(Int4AttentionTest, DecodeSweepHeadDimBlockSizeGroups) {
  uint64_t seed = 100;
  for (int32_t hd : kQuantizedKvHeadDims) {
    for (int32_t bs : kKvBlockSizes) {
      for (int32_t group : {1, 8, 12}) {
        Int4Case c;
        c.head_dim = hd;
        c.block_size = bs;
        c.group_size = group;
        c.num_kv_heads = group > 8 ? 1 : 2;
        c.newest_blocks = bs == 8 ? 3 : 1;
        c.kv_lens = {5, 129, 700, 2049};
        c.seed = seed++;
        run_int4_case(c);
      }
    }
  }
}

TEST_F(Int4AttentionTest, DecodeWindowsAndLongContext) {
  uint64_t seed = 200;
  for (int32_t window : {0, 16, 100, 1000}) {
    Int4Case c;
    c.block_size = 8;
    c.newest_blocks = 2;
    c.kv_lens = {1, 17, 97, 2049};
    c.window_left = window;
    c.num_splits = window == 1000 ? 5 : 0;
    c.seed = seed++;
    run_int4_case(c);
  }
  Int4Case long_ctx;
  long_ctx.kv_lens = {33000, 5};
  long_ctx.seed = seed++;
  run_int4_case(long_ctx);
}

TEST_F(Int4AttentionTest, SmallPrefillChunksOnCachedPrefixes) {
  uint64_t seed = 300;
  for (int32_t r : {1, 2, 3}) {
    Int4Case c;
    c.newest_blocks = r;
    c.kv_lens = {1, 40, 100, 130, 64};
    c.q_lens = {1, 40, 37, 1, 64};
    c.extra_newest = r == 2;
    c.seed = seed++;
    run_int4_case(c);
  }
}

TEST_F(Int4AttentionTest, PrefillSweepHeadDimBlockSizeGroupsWindows) {
  uint64_t seed = 400;
  for (int32_t hd : kQuantizedKvHeadDims) {
    for (int32_t bs : kKvBlockSizes) {
      for (int32_t group : {1, 4, 6}) {
        Int4Case c;
        c.head_dim = hd;
        c.block_size = bs;
        c.group_size = group;
        c.newest_blocks = bs <= 16 ? 2 : 1;
        c.kv_lens = {300, 77, 513};
        c.q_lens = {300, 20, 129};
        c.window_left = group == 6 ? 50 : -1;
        c.seed = seed++;
        run_int4_case(c);
      }
    }
  }
}

// kv_append into an INT4 cache: every row lands in the newest-blocks pool as is, and each block
// whose last slot was written is quantized from its newest-blocks block into exactly the CPU
// encoder's bytes; the int4 areas of blocks not filled stay untouched.
class KvAppendInt4Test : public CudaTest {};

TEST_F(KvAppendInt4Test, SmallQuantizesFilledBlocksAsTheCpu) {
  for (int32_t hd : kQuantizedKvHeadDims) {
    for (int32_t bs : {8, 16, 64}) {
      SCOPED_TRACE("hd" + std::to_string(hd) + " bs" + std::to_string(bs));
      std::mt19937_64 rng(static_cast<uint64_t>(hd * 1000 + bs));
      const int32_t kvh = 2;
      const kv::KvLayout layout = test_kv_layout(DType::kI4, 2, kvh, hd, bs);
      const kv::KvLayout newest_layout = test_kv_layout(DType::kBF16, 2, kvh, hd, bs);
      const int32_t pool_blocks = 6;
      // Tokens: block 2 filled whole, block 4 filled from its middle (the rest already in the
      // newest-blocks pool), block 1 partly written (not full); a padding token.
      std::vector<int64_t> slots, newest_slots;
      for (int32_t t = 0; t < bs; ++t) {
        slots.push_back(2 * bs + t);
        newest_slots.push_back(3 * bs + t);
      }
      for (int32_t t = bs / 2; t < bs; ++t) {
        slots.push_back(4 * bs + t);
        newest_slots.push_back(1 * bs + t);
      }
      for (int32_t t = 0; t < bs / 2; ++t) {
        slots.push_back(1 * bs + t);
        newest_slots.push_back(5 * bs + t);
      }
      slots.push_back(-1);
      newest_slots.push_back(-1);
      const auto n = static_cast<int32_t>(slots.size());
      const int64_t row = static_cast<int64_t>(kvh) * hd;
      std::vector<uint16_t> k = random_halves(static_cast<size_t>(n * row), DType::kBF16, -4.0f, 4.0f, rng);
      std::vector<uint16_t> v = random_halves(static_cast<size_t>(n * row), DType::kBF16, -2.0f, 3.0f, rng);
      // A constant channel and a NaN-free row of equal values exercise s == 0.
      for (int32_t t = 0; t < bs; ++t) k[static_cast<size_t>(t * row + 3)] = from_f32(0.5f, DType::kBF16);
      for (int32_t e = 0; e < hd; ++e) v[static_cast<size_t>(e)] = from_f32(-1.25f, DType::kBF16);
      std::vector<uint16_t> pool(static_cast<size_t>(layout.pool_bytes(pool_blocks)) / 2, 0xA5A5u);
      std::vector<uint16_t> newest_pool = random_kv_pool(newest_layout, pool_blocks, rng);

      DeviceBuffer d_pool = upload(pool);
      DeviceBuffer d_newest = upload(newest_pool);
      DeviceBuffer d_k = upload(k);
      DeviceBuffer d_v = upload(v);
      DeviceBuffer d_slots = upload(slots);
      DeviceBuffer d_newest_slots = upload(newest_slots);
      KvAppendParams p;
      p.cache = layout.layer_view(d_pool.data(), 1);
      p.newest = newest_layout.layer_view(d_newest.data(), 1);
      p.k = d_k.data();
      p.v = d_v.data();
      p.src_dtype = DType::kBF16;
      p.k_token_stride = row;
      p.v_token_stride = row;
      p.slot_mapping = d_slots.as<int64_t>();
      p.newest_slot_mapping = d_newest_slots.as<int64_t>();
      p.num_tokens = n;
      STRATA_ASSERT_OK(kv_append(p, nullptr));
      sync_device();
      const auto got = download<uint16_t>(d_pool, pool.size());
      const auto got_newest = download<uint16_t>(d_newest, newest_pool.size());

      // Expected newest-blocks pool: the host copy with the rows written.
      const PagedKvCacheView hnewest = newest_layout.layer_view(newest_pool.data(), 1);
      for (int32_t t = 0; t < n; ++t) {
        if (newest_slots[static_cast<size_t>(t)] < 0) continue;
        for (int32_t h = 0; h < kvh; ++h) {
          const int64_t at = hnewest.slot_offset(newest_slots[static_cast<size_t>(t)], h);
          for (int32_t e = 0; e < hd; ++e) {
            const auto from = static_cast<size_t>(t * row + h * hd + e);
            static_cast<uint16_t*>(hnewest.k_data)[at + e] = k[from];
            static_cast<uint16_t*>(hnewest.v_data)[at + e] = v[from];
          }
        }
      }
      EXPECT_EQ(got_newest, newest_pool);
      // Expected int4 pool: blocks 2 (from newest-blocks block 3) and 4 (from 1) by the CPU
      // encoder over F32 copies of the newest-blocks pool; everything else untouched.
      const kv::KvLayout f32_layout = test_kv_layout(DType::kF32, 2, kvh, hd, bs);
      std::vector<float> f32(static_cast<size_t>(f32_layout.pool_bytes(pool_blocks)) / 4);
      const PagedKvCacheView hf32 = f32_layout.layer_view(f32.data(), 1);
      for (int32_t b = 0; b < pool_blocks; ++b) {
        for (int32_t h = 0; h < kvh; ++h) {
          for (int32_t t = 0; t < bs; ++t) {
            for (int32_t e = 0; e < hd; ++e) {
              hf32.k<float>(b, h, t)[e] = bf16_to_f32(hnewest.k<uint16_t>(b, h, t)[e]);
              hf32.v<float>(b, h, t)[e] = bf16_to_f32(hnewest.v<uint16_t>(b, h, t)[e]);
            }
          }
        }
      }
      const PagedKvCacheView hpool = layout.layer_view(pool.data(), 1);
      cpu::quantize_int4_block(hf32, 3, hpool, 2);
      cpu::quantize_int4_block(hf32, 1, hpool, 4);
      int64_t diffs = 0;
      for (size_t i = 0; i < pool.size(); ++i) {
        if (got[i] != pool[i] && diffs++ < 10) {
          ADD_FAILURE() << "int4 pool byte pair " << i << ": got " << got[i] << " want " << pool[i];
        }
      }
      EXPECT_EQ(diffs, 0);
    }
  }
}

TEST_F(KvAppendInt4Test, RefusesANewestBlocksViewOfTheWrongShape) {
  const kv::KvLayout layout = test_kv_layout(DType::kI4, 1, 2, 128, 16);
  const kv::KvLayout newest_layout = test_kv_layout(DType::kBF16, 1, 2, 64, 16);
  std::vector<uint16_t> pool(static_cast<size_t>(layout.pool_bytes(2)) / 2);
  std::vector<uint16_t> newest(static_cast<size_t>(newest_layout.pool_bytes(2)) / 2);
  KvAppendParams p;
  p.cache = layout.layer_view(pool.data(), 0);
  p.newest = newest_layout.layer_view(newest.data(), 0);
  p.num_tokens = 1;
  EXPECT_EQ(kv_append(p, nullptr).code(), StatusCode::kInvalidArgument);
  KvInt4QuantizeParams qp;
  qp.cache = p.cache;
  qp.newest = p.newest;
  qp.num_tokens = 1;
  EXPECT_EQ(kv_int4_quantize_filled(qp, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cuda::testing

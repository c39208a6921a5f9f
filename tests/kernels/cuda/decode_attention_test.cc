// Paged decode attention against the double-precision CPU reference: every KV dtype, head dim and
// block size of the supported sets, ragged batches with odd lengths, split and unsplit, grouped
// query heads, sliding windows, the log-sum-exp and attention-mass outputs. Outputs are poisoned
// before each launch and every element (and nothing outside them) is checked.

#include "kernels/cuda/decode_attention.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "decode_reference.h"
#include "kv_test_pool.h"
#include "kernels/cuda/dispatch.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

struct DecodeCase {
  DType dtype = DType::kBF16;
  int32_t head_dim = 128;
  int32_t block_size = 16;
  int32_t num_kv_heads = 2;
  int32_t group_size = 4;
  std::vector<int32_t> kv_lens;
  int32_t window_left = -1;
  int32_t num_splits = 0;  // 0 = planner
  bool mass = false;
  bool share_first_block = false;  // sequences 0 and 1 share their first block (prefix cache)
  uint64_t seed = 1;
};

std::string describe(const DecodeCase& c) {
  std::string lens;
  for (int32_t l : c.kv_lens) lens += std::to_string(l) + ",";
  return std::string(dtype_name(c.dtype)) + " hd" + std::to_string(c.head_dim) + " bs" +
         std::to_string(c.block_size) + " kvh" + std::to_string(c.num_kv_heads) + " g" +
         std::to_string(c.group_size) + " lens[" + lens + "] window " +
         std::to_string(c.window_left) + " splits " + std::to_string(c.num_splits) +
         (c.mass ? " mass" : "") + (c.share_first_block ? " shared" : "");
}

bool is_poison(uint16_t bits) { return bits == 0xFFFFu; }

void run_case(const DecodeCase& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(c.seed);
  const int32_t num_seqs = static_cast<int32_t>(c.kv_lens.size());
  const int32_t num_qo_heads = c.num_kv_heads * c.group_size;
  const int32_t d = c.head_dim;

  // Block tables: random distinct block ids from a pool with a null block and spare blocks.
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
  std::vector<int32_t> indices(ids.begin(), ids.begin() + needed);
  if (c.share_first_block && num_seqs >= 2 && indptr[1] > indptr[0] && indptr[2] > indptr[1]) {
    indices[indptr[1]] = indices[indptr[0]];
  }

  // Two layers; the kernel reads layer 1, so the layer stride is exercised.
  const kv::KvLayout kv_layout = test_kv_layout(c.dtype, 2, c.num_kv_heads, d, c.block_size);
  const std::vector<uint16_t> pool = random_kv_pool(kv_layout, num_pool_blocks, rng);
  const DType qo_dtype = attention_qo_dtype(c.dtype);
  const int64_t q_seq_stride = static_cast<int64_t>(num_qo_heads) * d + 8;
  const int64_t o_seq_stride = static_cast<int64_t>(num_qo_heads) * d + 16;
  const std::vector<uint16_t> q =
      random_halves(static_cast<size_t>(num_seqs) * q_seq_stride, qo_dtype, -3.0f, 3.0f, rng);
  const int64_t num_slots = static_cast<int64_t>(num_pool_blocks) * c.block_size;
  std::vector<float> mass_init(static_cast<size_t>(num_slots) * c.num_kv_heads);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& x : mass_init) x = unit(rng);

  DeviceBuffer d_pool = upload(pool);
  DeviceBuffer d_q = upload(q);
  DeviceBuffer d_indptr = upload(indptr);
  DeviceBuffer d_indices = upload(indices.empty() ? std::vector<int32_t>{0} : indices);
  DeviceBuffer d_last = upload(last_len.empty() ? std::vector<int32_t>{0} : last_len);
  DeviceBuffer d_o =
      upload(std::vector<uint16_t>(static_cast<size_t>(num_seqs) * o_seq_stride, 0xFFFFu));
  DeviceBuffer d_lse =
      upload(std::vector<float>(static_cast<size_t>(num_seqs) * num_qo_heads, NAN));
  DeviceBuffer d_mass = upload(mass_init);
  auto ws = DeviceBuffer::allocate(
      decode_attention_workspace_bytes(num_seqs, num_qo_heads, d, kMaxDecodeSplits));
  ASSERT_TRUE(ws.ok());
  ASSERT_EQ(cudaMemset(ws->data(), 0, ws->bytes()), cudaSuccess);  // the merge counters

  DecodeAttentionParams p;
  p.q = d_q.data();
  p.q_seq_stride = q_seq_stride;
  p.o = d_o.data();
  p.o_seq_stride = o_seq_stride;
  p.layout = PagedKvLayout{d_indptr.as<int32_t>(), d_indices.as<int32_t>(), d_last.as<int32_t>(),
                           num_seqs, c.block_size};
  p.cache = kv_layout.layer_view(d_pool.data(), 1);
  p.qo_dtype = qo_dtype;
  p.num_qo_heads = num_qo_heads;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.window_left = c.window_left;
  p.max_kv_len = num_seqs == 0 ? 0 : *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
  p.num_splits = c.num_splits;
  p.lse = d_lse.as<float>();
  p.attn_mass = c.mass ? d_mass.as<float>() : nullptr;
  p.workspace = ws->data();
  p.workspace_bytes = ws->bytes();
  STRATA_ASSERT_OK(decode_attention(p, nullptr));
  sync_device();
  // The split merge counters (the workspace's first 4096 int32) are left zero for the next launch.
  const auto counters = download<int32_t>(*ws, 4096);
  EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), 4096);

  const PagedKvLayout host_layout{indptr.data(), indices.data(), last_len.data(), num_seqs,
                                  c.block_size};
  const PagedKvCacheView host_cache = kv_layout.layer_view(const_cast<uint16_t*>(pool.data()), 1);
  const DecodeReference ref = decode_reference(q, qo_dtype, q_seq_stride, host_layout, host_cache,
                                               num_qo_heads, p.sm_scale, c.window_left, num_slots);

  const auto o = download<uint16_t>(d_o, static_cast<size_t>(num_seqs) * o_seq_stride);
  const auto lse = download<float>(d_lse, static_cast<size_t>(num_seqs) * num_qo_heads);
  const Tolerance to = tolerance(Quantity::kAttentionOutput, qo_dtype);
  const Tolerance tl = tolerance(Quantity::kLogSumExp, qo_dtype);
  int64_t bad = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int64_t i = 0; i < o_seq_stride; ++i) {
      const uint16_t got_bits = o[s * o_seq_stride + i];
      if (i >= static_cast<int64_t>(num_qo_heads) * d) {
        if (!is_poison(got_bits) && bad++ < 10)
          ADD_FAILURE() << "padding written at seq " << s << " index " << i;
        continue;
      }
      const double want = ref.o[static_cast<size_t>(s) * num_qo_heads * d + i];
      const double got = to_f32(got_bits, qo_dtype);
      if (!(std::abs(got - want) <= to.atol + to.rtol * std::abs(want)) && bad++ < 10) {
        ADD_FAILURE() << "o seq " << s << " head " << i / d << " elem " << i % d << ": got " << got
                      << " want " << want;
      }
    }
    for (int32_t h = 0; h < num_qo_heads; ++h) {
      const size_t idx = static_cast<size_t>(s) * num_qo_heads + h;
      const double want = ref.lse[idx];
      const double got = lse[idx];
      const bool ok = std::isinf(want) ? (std::isinf(got) && got < 0)
                                       : std::abs(got - want) <= tl.atol + tl.rtol * std::abs(want);
      if (!ok && bad++ < 10)
        ADD_FAILURE() << "lse seq " << s << " head " << h << ": got " << got << " want " << want;
    }
  }
  const auto mass = download<float>(d_mass, mass_init.size());
  const Tolerance tm = tolerance(Quantity::kAttentionMass, c.dtype);
  for (size_t i = 0; i < mass.size(); ++i) {
    const double want = mass_init[i] + (c.mass ? ref.mass[i] : 0.0);
    if (!(std::abs(mass[i] - want) <= tm.atol + tm.rtol * std::abs(want)) && bad++ < 10) {
      ADD_FAILURE() << "mass slot " << i / c.num_kv_heads << " kv head " << i % c.num_kv_heads
                    << ": got " << mass[i] << " want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

class DecodeAttentionTest : public CudaTest {};

// The odd lengths of the sweep, ragged in one batch, with an empty sequence among them.
const std::vector<int32_t> kRaggedLens = {1, 17, 0, 97, 2049};

TEST_F(DecodeAttentionTest, SmallSplitAndUnsplit) {
  for (int32_t hd : kAttentionHeadDims) {
    for (int32_t splits : {1, 3}) {
      DecodeCase c;
      c.head_dim = hd;
      c.kv_lens = {1, 17, 97, 0, 40};
      c.num_splits = splits;
      run_case(c);
    }
  }
}

// Every dtype of `dtypes` x head dim of `head_dims` x block size, split (forced and planned)
// and unsplit, on the ragged batch.
void sweep(std::span<const DType> dtypes, std::span<const int32_t> head_dims, uint64_t seed) {
  for (DType dtype : dtypes) {
    for (int32_t hd : head_dims) {
      for (int32_t bs : kKvBlockSizes) {
        for (int32_t splits : {1, 4, 0}) {
          DecodeCase c;
          c.dtype = dtype;
          c.head_dim = hd;
          c.block_size = bs;
          c.kv_lens = kRaggedLens;
          c.num_splits = splits;
          c.seed = seed++;
          run_case(c);
        }
      }
    }
  }
}

TEST_F(DecodeAttentionTest, SweepDTypeHeadDimBlockSizeSplit) {
  sweep(kKvDTypes, kAttentionHeadDims, 100);
}

// Quantized caches (FP8 E4M3 / E5M2, INT8) read with BF16 queries, against float64 attention
// over the decoded codes.
TEST_F(DecodeAttentionTest, SweepQuantizedDTypeHeadDimBlockSizeSplit) {
  sweep(kQuantizedKvDTypes, kQuantizedKvHeadDims, 900);
}

// Quantized caches with grouped heads (one and two query-head tiles), windows and a long context.
TEST_F(DecodeAttentionTest, QuantizedGroupsWindowsAndLongContext) {
  uint64_t seed = 1000;
  for (DType dtype : kQuantizedKvDTypes) {
    for (int32_t group : {1, 5, 8, 12}) {
      DecodeCase c;
      c.dtype = dtype;
      c.group_size = group;
      c.num_kv_heads = group >= 8 ? 1 : 2;
      c.kv_lens = {17, 300, 1};
      c.num_splits = 2;
      c.seed = seed++;
      run_case(c);
    }
    for (int32_t window : {0, 16, 100}) {
      DecodeCase c;
      c.dtype = dtype;
      c.block_size = 8;
      c.kv_lens = {1, 17, 97, 2049};
      c.window_left = window;
      c.num_splits = 3;
      c.seed = seed++;
      run_case(c);
    }
    DecodeCase long_ctx;
    long_ctx.dtype = dtype;
    long_ctx.kv_lens = {33000, 5};
    long_ctx.share_first_block = true;
    long_ctx.seed = seed++;
    run_case(long_ctx);
  }
}

TEST_F(DecodeAttentionTest, LongContext33000SplitAndUnsplit) {
  for (DType dtype : kKvDTypes) {
    for (int32_t splits : {1, 0}) {
      DecodeCase c;
      c.dtype = dtype;
      c.kv_lens = {33000};
      c.num_splits = splits;
      c.seed = 7;
      run_case(c);
    }
  }
  DecodeCase batch;  // a long sequence next to short ones, planner's choice of splits
  batch.block_size = 64;
  batch.kv_lens = {33000, 1, 17};
  run_case(batch);
}

TEST_F(DecodeAttentionTest, GroupSizesIncludingMultipleQueryTiles) {
  for (int32_t group : {1, 2, 3, 5, 6, 8, 12, 16, 20, 32}) {
    for (int32_t splits : {1, 2}) {
      DecodeCase c;
      c.group_size = group;
      c.num_kv_heads = group >= 8 ? 1 : 2;
      c.kv_lens = {17, 300, 1};
      c.num_splits = splits;
      c.seed = 200 + group;
      run_case(c);
    }
  }
}

TEST_F(DecodeAttentionTest, SlidingWindow) {
  for (int32_t window : {0, 1, 16, 100, 5000}) {
    for (int32_t splits : {1, 3}) {
      DecodeCase c;
      c.block_size = 8;
      c.kv_lens = {1, 17, 97, 2049};
      c.window_left = window;
      c.num_splits = splits;
      c.seed = 300 + window;
      run_case(c);
    }
  }
}

// Head dim 256 (Gemma 3, in the release set): its group sizes (2 for 4B and 12B) and others,
// sliding windows (Gemma's 1024 and 512 among them) split and unsplit, a long context with a
// shared first block, both 16-bit dtypes.
TEST_F(DecodeAttentionTest, HeadDim256GroupsWindowsAndLongContext) {
  uint64_t seed = 1200;
  for (DType dtype : kKvDTypes) {
    for (int32_t group : {1, 2, 4, 8, 16}) {
      DecodeCase c;
      c.dtype = dtype;
      c.head_dim = 256;
      c.group_size = group;
      c.num_kv_heads = group >= 8 ? 1 : 2;
      c.kv_lens = {17, 300, 1, 0};
      c.num_splits = group % 2 == 0 ? 3 : 1;
      c.seed = seed++;
      run_case(c);
    }
    for (int32_t window : {0, 13, 511, 1023}) {
      for (int32_t splits : {1, 0}) {
        DecodeCase c;
        c.dtype = dtype;
        c.head_dim = 256;
        c.group_size = 2;
        c.block_size = window == 13 ? 8 : 64;
        c.kv_lens = {1, 17, 97, 2049};
        c.window_left = window;
        c.num_splits = splits;
        c.seed = seed++;
        run_case(c);
      }
    }
    DecodeCase long_ctx;
    long_ctx.dtype = dtype;
    long_ctx.head_dim = 256;
    long_ctx.group_size = 2;
    long_ctx.kv_lens = {33000, 5};
    long_ctx.share_first_block = true;
    long_ctx.seed = seed++;
    run_case(long_ctx);
  }
}

TEST_F(DecodeAttentionTest, AttentionMassAddsProbabilitiesPerSlot) {
  for (DType dtype : kKvDTypes) {
    for (int32_t splits : {1, 3}) {
      for (int32_t window : {-1, 50}) {
        DecodeCase c;
        c.dtype = dtype;
        c.head_dim = 64;
        c.kv_lens = {1, 17, 97, 0, 700};
        c.num_splits = splits;
        c.window_left = window;
        c.mass = true;
        c.seed = 400 + splits;
        run_case(c);
      }
    }
  }
  DecodeCase shared;  // a block read by two sequences receives both sequences' mass
  shared.kv_lens = {40, 33};
  shared.mass = true;
  shared.share_first_block = true;
  run_case(shared);
}

// Dispatch and validation answer without touching the device, so these run everywhere.
TEST(DecodeAttentionDispatchTest, UnsupportedConfigurationsReturnStatus) {
  alignas(16) static int32_t fake[64] = {};
  DecodeAttentionParams p;
  p.q = fake;
  p.o = fake;
  p.layout = PagedKvLayout{fake, fake, fake, 1, 16};
  p.cache.k_data = fake;
  p.cache.v_data = fake;
  p.cache.num_kv_heads = 1;
  p.cache.head_dim = 80;
  p.cache.block_size = 16;
  p.cache.token_stride = 80;
  p.cache.head_stride = 16 * 80;
  p.cache.block_stride = 16 * 80;
  p.cache.dtype = DType::kBF16;
  p.num_qo_heads = 1;
  p.q_seq_stride = 80;
  p.o_seq_stride = 80;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kUnsupported);  // head_dim 80

  p.cache.head_dim = 128;
  p.cache.token_stride = 128;
  p.cache.head_stride = p.cache.block_stride = 16 * 128;
  p.q_seq_stride = p.o_seq_stride = 128;
  p.cache.dtype = DType::kF32;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kUnsupported);  // F32 KV
  p.cache.dtype = DType::kBF16;

  p.cache.block_size = p.layout.block_size = 24;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kUnsupported);  // block size 24
  p.cache.block_size = p.layout.block_size = 16;

  p.q = reinterpret_cast<const char*>(fake) + 2;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kInvalidArgument);  // misaligned
  p.q = fake;

  p.num_qo_heads = 3;
  p.cache.num_kv_heads = 2;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kInvalidArgument);  // 3 % 2 != 0
  p.num_qo_heads = 1;
  p.cache.num_kv_heads = 1;

  // Quantized caches: fp16 queries have no instance, scales must be usable, no attention mass.
  p.cache.dtype = DType::kF8E4M3;
  p.cache.k_scale = p.cache.v_scale = 0.01f;
  p.qo_dtype = DType::kF16;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kUnsupported);
  p.qo_dtype = DType::kBF16;
  p.cache.k_scale = 0.0f;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.cache.k_scale = NAN;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.cache.k_scale = 0.01f;
  p.cache.dtype = DType::kI8;  // no scale areas
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.cache.k_scale_data = p.cache.v_scale_data = fake;
  p.cache.scale_block_stride = 64;
  p.cache.scale_head_stride = 16;
  alignas(16) static float mass[16] = {};
  p.attn_mass = mass;
  EXPECT_EQ(decode_attention(p, nullptr).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace strata::cuda::testing

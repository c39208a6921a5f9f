// Quantized KV caches at long context on the GPU (issue 11): for every cache dtype the decode
// kernel reads, the attention output's error against a float64 reference over the *unquantized*
// K/V stays, at 32K and 128K tokens, within 1.2x of its error at 4K (the kernel's fp32
// accumulation must not lose precision as the context grows -- the failure that once dropped an
// FP8 kernel's 128K needle accuracy from 91% to 13%), and under an absolute bound per dtype. The
// cache is written by kv_append from bf16 rows (the engine's path), one KV head with a 32-head
// query group (two query-head tiles), head dim 128, block 16, split as the planner chooses. INT4
// runs with R = 1 (only the query's own block from the residual pool, the rest int4 codes).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/kv_append.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

constexpr int32_t kHeadDim = 128;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kQHeads = 32;
constexpr int32_t kMaxLen = 128 * 1024;
constexpr int32_t kLengths[] = {4 * 1024, 32 * 1024, kMaxLen};

struct DTypeBound {
  DType dtype;
  double max_error;  // relative L2 error of the output at any length
};

class KvQuantLongContextTest : public CudaTest {};

TEST_F(KvQuantLongContextTest, ErrorAt32KAnd128KStaysWithin1_2xOf4K) {
  std::mt19937_64 rng(5);
  // K/V rows uniform in [-1, 1) as bf16 (what the model hands kv_append), q in [-3, 3).
  const std::vector<uint16_t> k_rows =
      random_halves(static_cast<size_t>(kMaxLen) * kHeadDim, DType::kBF16, -1.0f, 1.0f, rng);
  const std::vector<uint16_t> v_rows =
      random_halves(static_cast<size_t>(kMaxLen) * kHeadDim, DType::kBF16, -1.0f, 1.0f, rng);
  const std::vector<uint16_t> q =
      random_halves(static_cast<size_t>(kQHeads) * kHeadDim, DType::kBF16, -3.0f, 3.0f, rng);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));

  // float64 references over the bf16 values, per length.
  std::vector<std::vector<double>> ref;
  for (int32_t len : kLengths) {
    std::vector<double> o(static_cast<size_t>(kQHeads) * kHeadDim, 0.0);
    std::vector<double> s(static_cast<size_t>(len));
    for (int32_t h = 0; h < kQHeads; ++h) {
      double m = -INFINITY;
      for (int32_t t = 0; t < len; ++t) {
        double dot = 0.0;
        for (int32_t e = 0; e < kHeadDim; ++e) {
          dot += double{bf16_to_f32(q[static_cast<size_t>(h) * kHeadDim + e])} *
                 bf16_to_f32(k_rows[static_cast<size_t>(t) * kHeadDim + e]);
        }
        s[static_cast<size_t>(t)] = dot * scale;
        m = std::max(m, s[static_cast<size_t>(t)]);
      }
      double l = 0.0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int32_t t = 0; t < len; ++t) {
        for (int32_t e = 0; e < kHeadDim; ++e) {
          o[static_cast<size_t>(h) * kHeadDim + e] +=
              s[static_cast<size_t>(t)] / l *
              bf16_to_f32(v_rows[static_cast<size_t>(t) * kHeadDim + e]);
        }
      }
    }
    ref.push_back(std::move(o));
  }

  const int32_t num_blocks = kMaxLen / kBlockSize + 1;
  std::vector<int32_t> ids(num_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int64_t> slots(kMaxLen);
  for (int32_t t = 0; t < kMaxLen; ++t) {
    slots[static_cast<size_t>(t)] =
        int64_t{ids[static_cast<size_t>(t / kBlockSize)]} * kBlockSize + t % kBlockSize;
  }
  DeviceBuffer d_k = upload(k_rows);
  DeviceBuffer d_v = upload(v_rows);
  DeviceBuffer d_q = upload(q);
  DeviceBuffer d_slots = upload(slots);
  DeviceBuffer d_ids = upload(ids);
  DeviceBuffer d_o = upload(std::vector<uint16_t>(static_cast<size_t>(kQHeads) * kHeadDim));
  auto ws = DeviceBuffer::allocate(
      decode_attention_workspace_bytes(1, kQHeads, kHeadDim, kMaxDecodeSplits));
  ASSERT_TRUE(ws.ok());
  ASSERT_EQ(cudaMemset(ws->data(), 0, ws->bytes()), cudaSuccess);

  const DTypeBound bounds[] = {
      {DType::kBF16, 5e-3}, {DType::kF8E4M3, 6e-2}, {DType::kF8E5M2, 1.2e-1}, {DType::kI8, 1e-2},
      {DType::kI4, 1.2e-1}};
  // INT4's residual pool: bf16, as large as the pool, each block's copy at the same id (so the
  // slot mapping and block table serve both); R = 1.
  const kv::KvLayout res_layout(kv::KvSpec{1, 1, kHeadDim, DType::kBF16}, kBlockSize);
  DeviceBuffer res_pool =
      upload(std::vector<uint16_t>(static_cast<size_t>(res_layout.pool_bytes(num_blocks) / 2)));
  DeviceBuffer d_res_indptr = upload(std::vector<int32_t>{0, kMaxLen / kBlockSize});
  DeviceBuffer d_res_first = upload(std::vector<int32_t>{0});
  for (const DTypeBound& b : bounds) {
    SCOPED_TRACE(std::string(dtype_name(b.dtype)));
    // FP8 scales as calibration makes them: max |x| (1) over the format's largest value.
    kv::KvStaticScales scales;
    if (b.dtype == DType::kF8E4M3) scales = {{1.0f / 448.0f}, {1.0f / 448.0f}};
    if (b.dtype == DType::kF8E5M2) scales = {{1.0f / 57344.0f}, {1.0f / 57344.0f}};
    const kv::KvLayout layout(kv::KvSpec{1, 1, kHeadDim, b.dtype}, kBlockSize, scales);
    DeviceBuffer pool =
        upload(std::vector<uint16_t>(static_cast<size_t>(layout.pool_bytes(num_blocks) / 2)));
    KvAppendParams ap;
    ap.cache = layout.layer_view(pool.data(), 0);
    ap.k = d_k.data();
    ap.v = d_v.data();
    ap.src_dtype = DType::kBF16;
    ap.k_token_stride = ap.v_token_stride = kHeadDim;
    ap.slot_mapping = d_slots.as<int64_t>();
    ap.num_tokens = kMaxLen;
    ap.residual = res_layout.layer_view(res_pool.data(), 0);
    ap.residual_slot_mapping = d_slots.as<int64_t>();
    STRATA_ASSERT_OK(kv_append(ap, nullptr));
    std::vector<double> errors;
    for (size_t li = 0; li < std::size(kLengths); ++li) {
      const int32_t len = kLengths[li];
      const int32_t pages = len / kBlockSize;
      const std::vector<int32_t> indptr = {0, pages};
      const std::vector<int32_t> last = {kBlockSize};
      DeviceBuffer d_indptr = upload(indptr);
      DeviceBuffer d_last = upload(last);
      DecodeAttentionParams p;
      p.q = d_q.data();
      p.q_seq_stride = kQHeads * kHeadDim;
      p.o = d_o.data();
      p.o_seq_stride = kQHeads * kHeadDim;
      p.layout = PagedKvLayout{d_indptr.as<int32_t>(), d_ids.as<int32_t>(), d_last.as<int32_t>(), 1,
                               kBlockSize};
      p.cache = layout.layer_view(pool.data(), 0);
      if (b.dtype == DType::kI4) {
        p.residual = res_layout.layer_view(res_pool.data(), 0);
        p.layout.res_indptr = d_res_indptr.as<int32_t>();
        p.layout.res_indices = d_ids.as<int32_t>();
        p.layout.res_first_block = d_res_first.as<int32_t>();
        p.layout.residual_blocks = 1;
      }
      p.qo_dtype = DType::kBF16;
      p.num_qo_heads = kQHeads;
      p.sm_scale = static_cast<float>(scale);
      p.max_kv_len = len;
      p.workspace = ws->data();
      p.workspace_bytes = ws->bytes();
      STRATA_ASSERT_OK(decode_attention(p, nullptr));
      sync_device();
      const auto o = download<uint16_t>(d_o, static_cast<size_t>(kQHeads) * kHeadDim);
      double diff = 0.0, norm = 0.0;
      for (size_t i = 0; i < o.size(); ++i) {
        const double want = ref[li][i];
        diff += (bf16_to_f32(o[i]) - want) * (bf16_to_f32(o[i]) - want);
        norm += want * want;
      }
      errors.push_back(std::sqrt(diff / norm));
      EXPECT_LE(errors.back(), b.max_error) << "at " << len << " tokens";
    }
    std::printf("%-8s error 4K %.3e  32K %.3e (x%.3f)  128K %.3e (x%.3f)\n",
                std::string(dtype_name(b.dtype)).c_str(), errors[0], errors[1],
                errors[1] / errors[0], errors[2], errors[2] / errors[0]);
    EXPECT_LE(errors[1], 1.2 * errors[0]);
    EXPECT_LE(errors[2], 1.2 * errors[0]);
  }
}

}  // namespace
}  // namespace strata::cuda::testing

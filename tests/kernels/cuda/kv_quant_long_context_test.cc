// Quantized KV caches at long context on the GPU (issue 11): for every cache dtype, the attention
// output's error against a float64 reference over the *unquantized* K/V stays, at 32K and 128K
// tokens, within 1.2x of its error at 4K (the kernels' accumulation must not lose precision as
// the context grows -- the failure that once dropped an FP8 kernel's 128K needle accuracy from
// 91% to 13%), and under an absolute bound per dtype. Both attention kernels: decode (one query
// token, split as the planner chooses) and prefill (the last two tokens of the sequence as a
// chunk on the cached rest, the path whose FP8 products run on the FP8 tensor cores). The cache
// is written by kv_append from bf16 rows (the engine's path), one KV head with a 32-head query
// group, head dim 128, block 16. INT4 runs with R = 1 (only the newest block at full precision,
// from the newest-blocks group's pool; the rest int4 codes).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/prefill_attention.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {
namespace {

constexpr int32_t kHeadDim = 128;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kQHeads = 32;
constexpr int32_t kMaxLen = 128 * 1024;
constexpr int32_t kLengths[] = {4 * 1024, 32 * 1024, kMaxLen};
constexpr int32_t kNumBlocks = kMaxLen / kBlockSize + 1;

struct DTypeBound {
  DType dtype;
  double max_error;  // relative L2 error of the output at any length
};
constexpr DTypeBound kBounds[] = {{DType::kBF16, 5e-3},
                                  {DType::kF8E4M3, 6e-2},
                                  {DType::kF8E5M2, 1.2e-1},
                                  {DType::kI8, 1e-2},
                                  {DType::kI4, 1.2e-1}};

// kMaxLen tokens of K/V rows, uniform in [-1, 1) as bf16 (what the model hands kv_append), in
// pool blocks of a shuffled table, and INT4's bf16 newest-blocks pool (each block's copy at the
// same id, so the slot mapping and block table serve both).
struct LongContextKv {
  std::vector<uint16_t> k_rows, v_rows;
  std::vector<int32_t> ids;
  DeviceBuffer d_k, d_v, d_slots, d_ids, newest_pool;
  kv::KvLayout newest_layout{kv::KvSpec{1, 1, kHeadDim, DType::kBF16}, kBlockSize};

  explicit LongContextKv(std::mt19937_64& rng)
      : k_rows(
            random_halves(static_cast<size_t>(kMaxLen) * kHeadDim, DType::kBF16, -1.0f, 1.0f, rng)),
        v_rows(
            random_halves(static_cast<size_t>(kMaxLen) * kHeadDim, DType::kBF16, -1.0f, 1.0f, rng)),
        ids(kNumBlocks - 1) {
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int64_t> slots(kMaxLen);
    for (int32_t t = 0; t < kMaxLen; ++t) {
      slots[static_cast<size_t>(t)] =
          int64_t{ids[static_cast<size_t>(t / kBlockSize)]} * kBlockSize + t % kBlockSize;
    }
    d_k = upload(k_rows);
    d_v = upload(v_rows);
    d_slots = upload(slots);
    d_ids = upload(ids);
    newest_pool = upload(
        std::vector<uint16_t>(static_cast<size_t>(newest_layout.pool_bytes(kNumBlocks) / 2)));
  }

  // The pool layout of `dtype`, FP8 scales as calibration makes them: max |x| (1) over the
  // format's largest value.
  static kv::KvLayout layout(DType dtype) {
    kv::KvStaticScales scales;
    if (dtype == DType::kF8E4M3) scales = {{1.0f / 448.0f}, {1.0f / 448.0f}};
    if (dtype == DType::kF8E5M2) scales = {{1.0f / 57344.0f}, {1.0f / 57344.0f}};
    return kv::KvLayout(kv::KvSpec{1, 1, kHeadDim, dtype}, kBlockSize, scales);
  }

  // A pool of `layout` holding every token, written by kv_append (INT4: and the newest-blocks
  // pool).
  DeviceBuffer append(const kv::KvLayout& layout) {
    DeviceBuffer pool =
        upload(std::vector<uint16_t>(static_cast<size_t>(layout.pool_bytes(kNumBlocks) / 2)));
    KvAppendParams ap;
    ap.cache = layout.layer_view(pool.data(), 0);
    ap.k = d_k.data();
    ap.v = d_v.data();
    ap.src_dtype = DType::kBF16;
    ap.k_token_stride = ap.v_token_stride = kHeadDim;
    ap.slot_mapping = d_slots.as<int64_t>();
    ap.num_tokens = kMaxLen;
    ap.newest = newest_layout.layer_view(newest_pool.data(), 0);
    ap.newest_slot_mapping = d_slots.as<int64_t>();
    const Status s = kv_append(ap, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return pool;
  }

  // float64 attention of query rows q ([rows][kQHeads][kHeadDim] bf16), row r at position
  // positions[r] (causal), over the bf16 K/V values: [rows][kQHeads][kHeadDim].
  std::vector<double> reference(const std::vector<uint16_t>& q,
                                std::span<const int32_t> positions) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
    std::vector<double> o(positions.size() * kQHeads * kHeadDim, 0.0);
    for (size_t r = 0; r < positions.size(); ++r) {
      const int32_t len = positions[r] + 1;
      std::vector<double> s(static_cast<size_t>(len));
      for (int32_t h = 0; h < kQHeads; ++h) {
        const size_t row = r * kQHeads + static_cast<size_t>(h);
        double m = -INFINITY;
        for (int32_t t = 0; t < len; ++t) {
          double dot = 0.0;
          for (int32_t e = 0; e < kHeadDim; ++e) {
            dot += double{bf16_to_f32(q[row * kHeadDim + static_cast<size_t>(e)])} *
                   bf16_to_f32(k_rows[static_cast<size_t>(t) * kHeadDim + e]);
          }
          s[static_cast<size_t>(t)] = dot * scale;
          m = std::max(m, s[static_cast<size_t>(t)]);
        }
        double l = 0.0;
        for (double& x : s) l += (x = std::exp(x - m));
        for (int32_t t = 0; t < len; ++t) {
          for (int32_t e = 0; e < kHeadDim; ++e) {
            o[row * kHeadDim + static_cast<size_t>(e)] +=
                s[static_cast<size_t>(t)] / l *
                bf16_to_f32(v_rows[static_cast<size_t>(t) * kHeadDim + e]);
          }
        }
      }
    }
    return o;
  }
};

double relative_l2(const std::vector<uint16_t>& got, const std::vector<double>& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = bf16_to_f32(got[i]) - want[i];
    diff += d * d;
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// For every dtype: the pool, then run(dtype, layout, pool, li) -> the relative error at
// kLengths[li]; each error within the dtype's bound, and 32K's and 128K's within 1.2x of 4K's.
void check_error_growth(const char* kernel, LongContextKv& kv,
                        const std::function<double(const DTypeBound&, const kv::KvLayout&,
                                                   const DeviceBuffer&, size_t)>& run) {
  for (const DTypeBound& b : kBounds) {
    SCOPED_TRACE(std::string(kernel) + " " + std::string(dtype_name(b.dtype)));
    const kv::KvLayout layout = LongContextKv::layout(b.dtype);
    const DeviceBuffer pool = kv.append(layout);
    std::vector<double> errors;
    for (size_t li = 0; li < std::size(kLengths); ++li) {
      errors.push_back(run(b, layout, pool, li));
      EXPECT_LE(errors.back(), b.max_error) << "at " << kLengths[li] << " tokens";
    }
    std::printf("%-7s %-8s error 4K %.3e  32K %.3e (x%.3f)  128K %.3e (x%.3f)\n", kernel,
                std::string(dtype_name(b.dtype)).c_str(), errors[0], errors[1],
                errors[1] / errors[0], errors[2], errors[2] / errors[0]);
    EXPECT_LE(errors[1], 1.2 * errors[0]);
    EXPECT_LE(errors[2], 1.2 * errors[0]);
  }
}

// INT4's newest-blocks group (R = 1): the whole table, from logical block 0.
struct NewestTable {
  DeviceBuffer indptr, first;
  explicit NewestTable(int32_t pages)
      : indptr(upload(std::vector<int32_t>{0, pages})), first(upload(std::vector<int32_t>{0})) {}
  // The group's view beside group 0's layout (its sequences and last-block lengths).
  NewestBlocksView view(const LongContextKv& kv, const PagedKvLayout& layout) const {
    NewestBlocksView v;
    v.cache = kv.newest_layout.layer_view(kv.newest_pool.data(), 0);
    v.layout = layout;
    v.layout.kv_indptr = indptr.as<int32_t>();
    v.layout.kv_indices = kv.d_ids.as<int32_t>();
    v.layout.first_block = first.as<int32_t>();
    v.blocks = 1;
    return v;
  }
};

// One sequence of `len` tokens over the shuffled table, and the parameters both kernels take
// alike: its paged layout, the cache (INT4: with its newest blocks), the query heads and scale.
struct OneSequence {
  DeviceBuffer indptr, last;
  explicit OneSequence(int32_t len)
      : indptr(upload(std::vector<int32_t>{0, len / kBlockSize})),
        last(upload(std::vector<int32_t>{kBlockSize})) {}

  template <typename Params>
  void fill(Params& p, const LongContextKv& kv, DType dtype, const kv::KvLayout& layout,
            const DeviceBuffer& pool, const NewestTable& newest) const {
    p.layout = PagedKvLayout{indptr.as<int32_t>(), kv.d_ids.as<int32_t>(), last.as<int32_t>(), 1,
                             kBlockSize};
    p.cache = layout.layer_view(pool.data(), 0);
    if (dtype == DType::kI4) p.newest = newest.view(kv, p.layout);
    p.qo_dtype = DType::kBF16;
    p.num_qo_heads = kQHeads;
    p.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  }
};

class KvQuantLongContextTest : public CudaTest {};

TEST_F(KvQuantLongContextTest, ErrorAt32KAnd128KStaysWithin1_2xOf4K) {
  std::mt19937_64 rng(5);
  LongContextKv kv(rng);
  // One query token (q in [-3, 3)), the sequence's last.
  const std::vector<uint16_t> q =
      random_halves(static_cast<size_t>(kQHeads) * kHeadDim, DType::kBF16, -3.0f, 3.0f, rng);
  std::vector<std::vector<double>> ref;
  for (int32_t len : kLengths) ref.push_back(kv.reference(q, std::vector<int32_t>{len - 1}));

  DeviceBuffer d_q = upload(q);
  DeviceBuffer d_o = upload(std::vector<uint16_t>(static_cast<size_t>(kQHeads) * kHeadDim));
  auto ws = DeviceBuffer::allocate(
      decode_attention_workspace_bytes(1, kQHeads, kHeadDim, kMaxDecodeSplits));
  ASSERT_TRUE(ws.ok());
  ASSERT_EQ(cudaMemset(ws->data(), 0, ws->bytes()), cudaSuccess);
  const NewestTable newest(kMaxLen / kBlockSize);
  check_error_growth(
      "decode", kv,
      [&](const DTypeBound& b, const kv::KvLayout& layout, const DeviceBuffer& pool, size_t li) {
        const int32_t len = kLengths[li];
        const OneSequence seq(len);
        DecodeAttentionParams p;
        p.q = d_q.data();
        p.q_seq_stride = kQHeads * kHeadDim;
        p.o = d_o.data();
        p.o_seq_stride = kQHeads * kHeadDim;
        seq.fill(p, kv, b.dtype, layout, pool, newest);
        p.max_kv_len = len;
        p.workspace = ws->data();
        p.workspace_bytes = ws->bytes();
        const Status s = decode_attention(p, nullptr);
        EXPECT_TRUE(s.ok()) << s.to_string();
        sync_device();
        return relative_l2(download<uint16_t>(d_o, static_cast<size_t>(kQHeads) * kHeadDim),
                           ref[li]);
      });
}

// The prefill kernels at the same lengths: the sequence's last two tokens as a chunk on the
// cached rest (rows at positions len - 2 and len - 1).
TEST_F(KvQuantLongContextTest, PrefillErrorAt32KAnd128KStaysWithin1_2xOf4K) {
  constexpr int32_t kRows = 2;
  std::mt19937_64 rng(6);
  LongContextKv kv(rng);
  const std::vector<uint16_t> q = random_halves(static_cast<size_t>(kRows) * kQHeads * kHeadDim,
                                                DType::kBF16, -3.0f, 3.0f, rng);
  std::vector<std::vector<double>> ref;
  for (int32_t len : kLengths) {
    ref.push_back(kv.reference(q, std::vector<int32_t>{len - 2, len - 1}));
  }

  const size_t out = static_cast<size_t>(kRows) * kQHeads * kHeadDim;
  DeviceBuffer d_q = upload(q);
  DeviceBuffer d_o = upload(std::vector<uint16_t>(out));
  DeviceBuffer d_qo = upload(std::vector<int32_t>{0, kRows});
  DeviceBuffer d_lse = upload(
      std::vector<float>(static_cast<size_t>(prefill_int4_workspace_floats(kRows, kQHeads))));
  const NewestTable newest(kMaxLen / kBlockSize);
  check_error_growth(
      "prefill", kv,
      [&](const DTypeBound& b, const kv::KvLayout& layout, const DeviceBuffer& pool, size_t li) {
        const OneSequence seq(kLengths[li]);
        PrefillAttentionParams p;
        p.q = d_q.data();
        p.q_token_stride = kQHeads * kHeadDim;
        p.o = d_o.data();
        p.o_token_stride = kQHeads * kHeadDim;
        p.qo_indptr = d_qo.as<int32_t>();
        seq.fill(p, kv, b.dtype, layout, pool, newest);
        if (b.dtype == DType::kI4) p.lse_workspace = d_lse.as<float>();
        p.max_q_len = kRows;
        const Status s = prefill_attention(p, nullptr);
        EXPECT_TRUE(s.ok()) << s.to_string();
        sync_device();
        return relative_l2(download<uint16_t>(d_o, out), ref[li]);
      });
}

}  // namespace
}  // namespace strata::cuda::testing

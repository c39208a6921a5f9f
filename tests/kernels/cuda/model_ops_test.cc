// The decoder's non-attention ops (model_ops.h) against simple double-precision host references:
// odd token counts (1, 3, 17, 257), hidden sizes 64, 896, 4096 and one that is not a multiple of
// 8 (the scalar paths), every weight dtype, delta fusion and row gathers for the norm, per-head
// norm on and off for RoPE at head dims 64, 96 and 128 with aligned and unaligned token strides.
// Outputs are poisoned before each launch; elements a kernel must not touch are compared bitwise.

#include "kernels/cuda/model_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/kv_append.h"
#include "kv/kv_layout.h"
#include "kv_test_pool.h"

namespace strata::cuda::testing {
namespace {

// Tolerances of every op in this file: |got - ref| <= atol + rtol * |ref| per element.
enum class Op { kEmbedding, kRmsNorm, kQkNormRope, kSiluAndMul };
Tolerance op_tolerance(Op op) {
  switch (op) {
    // A 16-bit float widened to fp32 is exact.
    case Op::kEmbedding:
      return {0.0, 0.0};
    // One rounding to bf16 (2^-9 relative) dominates; fp32 sums and rsqrtf add about 1e-6.
    case Op::kRmsNorm:
    case Op::kSiluAndMul:
      return {1e-6, 4e-3};
    // As above, plus fp32 cancellation in x1 c - x2 s for inputs up to ~3 (norm weights <= 1.5).
    case Op::kQkNormRope:
      return {2e-5, 4e-3};
  }
  return {0.0, 0.0};
}

class ModelOpsTest : public CudaTest {};

constexpr uint16_t kPoison16 = 0xFFFFu;  // a NaN in bf16 and fp16

// Counts elements outside the tolerance and reports the first few.
void expect_close(const std::vector<double>& ref, const std::vector<float>& got, Tolerance tol,
                  const char* what) {
  ASSERT_EQ(ref.size(), got.size());
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol.atol + tol.rtol * std::abs(ref[i]))) {
      if (bad < 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i];
      }
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements outside the tolerance";
}

std::vector<float> bf16_to_floats(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_f32(v[i]);
  return f;
}

// A weight vector of dtype (BF16, F16 or F32) with values in [lo, hi): its device copy and the
// exact values the device sees.
struct Weight {
  DeviceBuffer buf;
  std::vector<double> values;
};
Weight make_weight(int64_t n, DType dtype, float lo, float hi, std::mt19937_64& rng) {
  Weight w;
  if (dtype == DType::kF32) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(rng);
    w.values.assign(v.begin(), v.end());
    w.buf = upload(v);
  } else {
    const std::vector<uint16_t> v = random_halves(static_cast<size_t>(n), dtype, lo, hi, rng);
    for (uint16_t x : v) w.values.push_back(to_f32(x, dtype));
    w.buf = upload(v);
  }
  return w;
}

std::vector<float> random_floats(size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ---- embedding ----------------------------------------------------------------------------

void run_embedding(DType dtype, int32_t hidden, int32_t num_tokens, int64_t out_offset,
                   uint64_t seed, float scale = 1.0f) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " hidden " + std::to_string(hidden) + " tokens " +
               std::to_string(num_tokens) + " offset " + std::to_string(out_offset) + " scale " +
               std::to_string(scale));
  std::mt19937_64 rng(seed);
  constexpr int32_t kVocab = 1000;
  const std::vector<uint16_t> table =
      random_halves(static_cast<size_t>(kVocab) * hidden, dtype, -2.0f, 2.0f, rng);
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens));
  std::uniform_int_distribution<int32_t> id_dist(0, kVocab - 1);
  for (auto& id : ids) id = id_dist(rng);
  const size_t n = static_cast<size_t>(num_tokens) * hidden;
  DeviceBuffer d_table = upload(table);
  DeviceBuffer d_ids = upload(ids);
  DeviceBuffer d_out = upload(std::vector<float>(n + out_offset, std::nanf("")));
  EmbeddingParams p;
  p.token_ids = d_ids.as<int32_t>();
  p.table = d_table.data();
  p.table_dtype = dtype;
  p.out = d_out.as<float>() + out_offset;
  p.num_tokens = num_tokens;
  p.hidden = hidden;
  p.scale = scale;
  STRATA_ASSERT_OK(embedding(p, nullptr));
  sync_device();
  const auto got = download<float>(d_out, n + out_offset);
  std::vector<double> ref(n);
  for (int32_t t = 0; t < num_tokens; ++t) {
    for (int32_t i = 0; i < hidden; ++i) {
      ref[static_cast<size_t>(t) * hidden + i] =
          static_cast<double>(to_f32(table[static_cast<size_t>(ids[t]) * hidden + i], dtype)) *
          scale;
    }
  }
  expect_close(ref, std::vector<float>(got.begin() + out_offset, got.end()),
               op_tolerance(Op::kEmbedding), "embedding");
}

TEST_F(ModelOpsTest, EmbeddingGathersRows) {
  uint64_t seed = 1;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int32_t hidden : {64, 896, 4096, 100}) {
      for (int32_t tokens : {1, 3, 17, 257}) run_embedding(dtype, hidden, tokens, 0, seed++);
    }
  }
  run_embedding(DType::kBF16, 64, 17, 1, seed++);  // out not 16-byte aligned: scalar path
}

// Gemma 3's scaled embeddings (sqrt(3072) in bf16 = 55.5), vector and scalar paths.
TEST_F(ModelOpsTest, EmbeddingScalesRows) {
  run_embedding(DType::kBF16, 896, 17, 0, 50, 55.5f);
  run_embedding(DType::kF16, 100, 3, 0, 51, 11.3125f);
  run_embedding(DType::kBF16, 64, 17, 1, 52, 16.0f);
}

// ---- rms_norm -----------------------------------------------------------------------------

struct NormCase {
  DType weight_dtype = DType::kBF16;
  int32_t hidden = 4096;
  int32_t num_rows = 1;
  bool delta = false;
  bool gather = false;
  uint64_t seed = 1;
  bool delta_norm = false;  // Gemma 3's sandwich: the delta normed by delta_weight before the add
};

void run_rms_norm(const NormCase& c) {
  SCOPED_TRACE(std::string(dtype_name(c.weight_dtype)) + " hidden " + std::to_string(c.hidden) +
               " rows " + std::to_string(c.num_rows) + (c.delta ? " delta" : "") +
               (c.gather ? " gather" : "") + (c.delta_norm ? " delta_norm" : ""));
  std::mt19937_64 rng(c.seed);
  constexpr float kEps = 1e-5f;
  const int32_t h = c.hidden;
  const int32_t residual_rows = c.gather ? c.num_rows + 5 : c.num_rows;
  const std::vector<float> residual =
      random_floats(static_cast<size_t>(residual_rows) * h, -3.0f, 3.0f, rng);
  const std::vector<float> delta =
      c.delta ? random_floats(static_cast<size_t>(c.num_rows) * h, -1.0f, 1.0f, rng)
              : std::vector<float>();
  Weight w = make_weight(h, c.weight_dtype, 0.5f, 1.5f, rng);
  Weight dw = make_weight(h, DType::kF32, 0.5f, 2.0f, rng);
  std::vector<int32_t> rows;
  if (c.gather) {
    std::uniform_int_distribution<int32_t> dist(0, residual_rows - 1);
    for (int32_t r = 0; r < c.num_rows; ++r) rows.push_back(dist(rng));
  }
  const size_t n_out = static_cast<size_t>(c.num_rows) * h;
  DeviceBuffer d_residual = upload(residual);
  DeviceBuffer d_delta = c.delta ? upload(delta) : DeviceBuffer();
  DeviceBuffer d_rows = c.gather ? upload(rows) : DeviceBuffer();
  DeviceBuffer d_out = upload(std::vector<uint16_t>(n_out, kPoison16));
  RmsNormParams p;
  p.residual = d_residual.as<float>();
  p.delta = c.delta ? d_delta.as<float>() : nullptr;
  p.delta_weight = c.delta_norm ? dw.buf.as<float>() : nullptr;
  p.weight = w.buf.data();
  p.weight_dtype = c.weight_dtype;
  p.rows = c.gather ? d_rows.as<int32_t>() : nullptr;
  p.out = d_out.data();
  p.num_rows = c.num_rows;
  p.hidden = h;
  p.eps = kEps;
  STRATA_ASSERT_OK(rms_norm(p, nullptr));
  sync_device();

  // The residual after the fused add, in the same fp32 operation the kernel performs.
  std::vector<float> want_residual = residual;
  if (c.delta && !c.delta_norm) {
    for (size_t i = 0; i < delta.size(); ++i) want_residual[i] = residual[i] + delta[i];
  }
  if (c.delta_norm) {  // in double: the kernel's fp32 sum order differs, so compare within fp32
    for (int32_t r = 0; r < c.num_rows; ++r) {
      const float* d = &delta[static_cast<size_t>(r) * h];
      double ss = 0.0;
      for (int32_t i = 0; i < h; ++i) ss += static_cast<double>(d[i]) * d[i];
      const double inv = 1.0 / std::sqrt(ss / h + static_cast<double>(kEps));
      for (int32_t i = 0; i < h; ++i) {
        const size_t at = static_cast<size_t>(r) * h + i;
        want_residual[at] = static_cast<float>(residual[at] + d[i] * inv * dw.values[i]);
      }
    }
  }
  std::vector<double> ref(n_out);
  for (int32_t r = 0; r < c.num_rows; ++r) {
    const float* x = &want_residual[static_cast<size_t>(c.gather ? rows[r] : r) * h];
    double ss = 0.0;
    for (int32_t i = 0; i < h; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ss / h + static_cast<double>(kEps));
    for (int32_t i = 0; i < h; ++i) ref[static_cast<size_t>(r) * h + i] = x[i] * inv * w.values[i];
  }
  expect_close(ref, bf16_to_floats(download<uint16_t>(d_out, n_out)), op_tolerance(Op::kRmsNorm),
               "rms_norm out");
  const auto got_residual = download<float>(d_residual, want_residual.size());
  if (c.delta_norm) {
    expect_close(std::vector<double>(want_residual.begin(), want_residual.end()), got_residual,
                 {1e-5, 1e-5}, "residual after the normed add");
  } else {
    EXPECT_EQ(std::memcmp(got_residual.data(), want_residual.data(), want_residual.size() * 4), 0)
        << "residual after the fused add";
  }
}

// Gemma 3's sandwich norms: residual += rmsnorm(delta) * delta_weight, then the norm, in one
// launch; vector and scalar paths, up to Gemma 3 27B's 5376 and the widest it takes (8192).
TEST_F(ModelOpsTest, RmsNormNormsTheDeltaBeforeTheAdd) {
  uint64_t seed = 350;
  for (DType wd : {DType::kBF16, DType::kF32}) {
    for (int32_t hidden : {64, 100, 896, 3840, 5376, 8192}) {
      for (int32_t rows : {1, 17}) {
        NormCase c{wd, hidden, rows, true, false, seed++};
        c.delta_norm = true;
        run_rms_norm(c);
      }
    }
  }
}

TEST_F(ModelOpsTest, RmsNormMatchesReference) {
  uint64_t seed = 100;
  for (DType wd : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int32_t hidden : {64, 896, 4096}) {
      for (int32_t rows : {1, 3, 17, 257}) {
        for (bool delta : {false, true}) run_rms_norm({wd, hidden, rows, delta, false, seed++});
      }
    }
  }
}

TEST_F(ModelOpsTest, RmsNormGathersRows) {
  uint64_t seed = 200;
  for (int32_t hidden : {64, 896, 4096}) {
    for (int32_t rows : {1, 3, 17, 257}) {
      run_rms_norm({DType::kBF16, hidden, rows, false, true, seed++});
    }
  }
}

TEST_F(ModelOpsTest, RmsNormScalarPathAndWideRows) {
  run_rms_norm({DType::kBF16, 100, 17, true, false, 300});   // hidden not a multiple of 8
  run_rms_norm({DType::kF32, 4999, 3, true, false, 301});    // scalar, 8 chunks per thread
  run_rms_norm({DType::kBF16, 16384, 3, true, false, 302});  // 8 chunks of 8 per thread
  run_rms_norm({DType::kBF16, 40000, 2, false, true, 303});  // 640 threads
}

// A row's output and updated residual are the same bits alone and inside a batch of 257.
TEST_F(ModelOpsTest, RmsNormRowAloneEqualsRowInBatch) {
  for (int32_t h : {896, 4096}) {
    SCOPED_TRACE("hidden " + std::to_string(h));
    std::mt19937_64 rng(400 + h);
    constexpr int32_t kRows = 257;
    const size_t n = static_cast<size_t>(kRows) * h;
    const std::vector<float> residual = random_floats(n, -3.0f, 3.0f, rng);
    const std::vector<float> delta = random_floats(n, -1.0f, 1.0f, rng);
    Weight w = make_weight(h, DType::kBF16, 0.5f, 1.5f, rng);
    DeviceBuffer d_residual = upload(residual);
    DeviceBuffer d_delta = upload(delta);
    DeviceBuffer d_out = upload(std::vector<uint16_t>(n, kPoison16));
    RmsNormParams p;
    p.residual = d_residual.as<float>();
    p.delta = d_delta.as<float>();
    p.weight = w.buf.data();
    p.out = d_out.data();
    p.num_rows = kRows;
    p.hidden = h;
    STRATA_ASSERT_OK(rms_norm(p, nullptr));
    sync_device();
    const auto batch_out = download<uint16_t>(d_out, n);
    const auto batch_residual = download<float>(d_residual, n);
    for (int32_t r : {0, 1, 128, 256}) {
      const size_t off = static_cast<size_t>(r) * h;
      DeviceBuffer one_residual =
          upload(std::vector<float>(residual.begin() + off, residual.begin() + off + h));
      DeviceBuffer one_delta =
          upload(std::vector<float>(delta.begin() + off, delta.begin() + off + h));
      DeviceBuffer one_out = upload(std::vector<uint16_t>(h, kPoison16));
      p.residual = one_residual.as<float>();
      p.delta = one_delta.as<float>();
      p.out = one_out.data();
      p.num_rows = 1;
      STRATA_ASSERT_OK(rms_norm(p, nullptr));
      sync_device();
      const auto out = download<uint16_t>(one_out, h);
      const auto res = download<float>(one_residual, h);
      EXPECT_EQ(std::memcmp(out.data(), batch_out.data() + off, h * 2), 0) << "row " << r;
      EXPECT_EQ(std::memcmp(res.data(), batch_residual.data() + off, h * 4), 0) << "row " << r;
    }
  }
}

// ---- qk_norm_rope -------------------------------------------------------------------------

struct RopeCase {
  int32_t head_dim = 128;
  int32_t num_q_heads = 8;
  int32_t num_kv_heads = 2;
  int32_t num_tokens = 1;
  bool norm = false;
  DType norm_dtype = DType::kBF16;
  int32_t stride_pad = 0;  // extra elements per token row (2: 4-byte path; 1: scalar path)
  float attention_scaling = 1.0f;
  uint64_t seed = 1;
};

void run_qk_norm_rope(const RopeCase& c) {
  SCOPED_TRACE("hd " + std::to_string(c.head_dim) + " q/kv " + std::to_string(c.num_q_heads) + "/" +
               std::to_string(c.num_kv_heads) + " tokens " + std::to_string(c.num_tokens) +
               (c.norm ? " norm " + std::string(dtype_name(c.norm_dtype)) : "") + " pad " +
               std::to_string(c.stride_pad) + " scaling " + std::to_string(c.attention_scaling));
  std::mt19937_64 rng(c.seed);
  constexpr float kEps = 1e-6f;
  const int32_t hd = c.head_dim;
  const int32_t half = hd / 2;
  const int32_t num_heads = c.num_q_heads + c.num_kv_heads;  // rotated
  const int64_t stride = (num_heads + c.num_kv_heads) * static_cast<int64_t>(hd) + c.stride_pad;
  const size_t n = static_cast<size_t>(c.num_tokens) * stride;
  const std::vector<uint16_t> qkv = random_halves(n, DType::kBF16, -2.0f, 2.0f, rng);
  std::vector<int32_t> positions(static_cast<size_t>(c.num_tokens));
  std::uniform_int_distribution<int32_t> pos_dist(0, 40000);
  for (auto& pos : positions) pos = pos_dist(rng);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(1e6, -2.0 * i / hd));
  }
  Weight q_norm = make_weight(hd, c.norm_dtype, 0.5f, 1.5f, rng);
  Weight k_norm = make_weight(hd, c.norm_dtype, 0.5f, 1.5f, rng);
  DeviceBuffer d_qkv = upload(qkv);
  DeviceBuffer d_pos = upload(positions);
  DeviceBuffer d_inv = upload(inv_freq);
  QkNormRopeParams p;
  p.qkv = d_qkv.data();
  p.token_stride = stride;
  p.positions = d_pos.as<int32_t>();
  p.inv_freq = d_inv.as<float>();
  p.q_norm = c.norm ? q_norm.buf.data() : nullptr;
  p.k_norm = c.norm ? k_norm.buf.data() : nullptr;
  p.norm_dtype = c.norm_dtype;
  p.eps = kEps;
  p.attention_scaling = c.attention_scaling;
  p.num_tokens = c.num_tokens;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = hd;
  STRATA_ASSERT_OK(qk_norm_rope(p, nullptr));
  sync_device();
  const auto got = download<uint16_t>(d_qkv, n);

  std::vector<double> ref;
  std::vector<float> got_rotated;
  int64_t untouched_changed = 0;
  for (int32_t t = 0; t < c.num_tokens; ++t) {
    const size_t row = static_cast<size_t>(t) * stride;
    for (int32_t h = 0; h < num_heads; ++h) {
      std::vector<double> x(static_cast<size_t>(hd));
      for (int32_t i = 0; i < hd; ++i) x[i] = bf16_to_f32(qkv[row + h * hd + i]);
      if (c.norm) {
        const std::vector<double>& w = h < c.num_q_heads ? q_norm.values : k_norm.values;
        double ss = 0.0;
        for (double v : x) ss += v * v;
        const double inv = 1.0 / std::sqrt(ss / hd + static_cast<double>(kEps));
        for (int32_t i = 0; i < hd; ++i) x[i] = x[i] * inv * w[i];
      }
      std::vector<double> y(static_cast<size_t>(hd));
      for (int32_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(positions[t]) * inv_freq[i];
        const double cs = std::cos(angle) * c.attention_scaling;
        const double sn = std::sin(angle) * c.attention_scaling;
        y[i] = x[i] * cs - x[i + half] * sn;
        y[i + half] = x[i + half] * cs + x[i] * sn;
      }
      for (int32_t i = 0; i < hd; ++i) {
        ref.push_back(y[i]);
        got_rotated.push_back(bf16_to_f32(got[row + h * hd + i]));
      }
    }
    for (int64_t i = static_cast<int64_t>(num_heads) * hd; i < stride; ++i) {
      untouched_changed += got[row + i] != qkv[row + i];  // v heads and padding
    }
  }
  expect_close(ref, got_rotated, op_tolerance(Op::kQkNormRope), "q/k");
  EXPECT_EQ(untouched_changed, 0) << "v heads or padding were written";
}

TEST_F(ModelOpsTest, QkNormRopeMatchesReference) {
  uint64_t seed = 500;
  for (int32_t hd : {64, 128}) {
    for (bool norm : {false, true}) {
      for (int32_t tokens : {1, 3, 17, 257}) {
        RopeCase c;
        c.head_dim = hd;
        c.norm = norm;
        c.num_tokens = tokens;
        c.seed = seed++;
        run_qk_norm_rope(c);
      }
    }
  }
}

TEST_F(ModelOpsTest, QkNormRopeOtherShapesAndPaths) {
  uint64_t seed = 600;
  auto make = [&](int32_t hd, int32_t q, int32_t kv, int32_t tokens, bool norm) {
    RopeCase c;
    c.head_dim = hd;
    c.num_q_heads = q;
    c.num_kv_heads = kv;
    c.num_tokens = tokens;
    c.norm = norm;
    c.seed = seed++;
    return c;
  };
  run_qk_norm_rope(make(128, 32, 8, 17, false));  // Llama-3.1-8B
  run_qk_norm_rope(make(64, 14, 2, 17, true));    // Qwen-like, 16 rotated heads
  run_qk_norm_rope(make(96, 12, 4, 17, true));    // 6 chunks of 8: lanes padded to 8
  run_qk_norm_rope(make(256, 4, 1, 3, true));     // widest head
  for (DType nd : {DType::kF16, DType::kF32}) {
    RopeCase c = make(128, 8, 2, 17, true);
    c.norm_dtype = nd;
    run_qk_norm_rope(c);
  }
  for (int32_t pad : {2, 1}) {  // 4-byte (2 elements) and scalar paths
    for (int32_t hd : {64, 128, 256}) {
      RopeCase c = make(hd, 4, 2, 17, true);
      c.stride_pad = pad;
      run_qk_norm_rope(c);
    }
  }
  RopeCase scaled = make(128, 8, 2, 17, false);
  scaled.attention_scaling = 1.25f;
  run_qk_norm_rope(scaled);
}

// The fused KV append: qk_norm_rope with a slot mapping writes the pool (and the qkv buffer)
// byte for byte as qk_norm_rope followed by kv_append, for every cache dtype, with and without
// q/k norms, a padding token (slot -1), a head dim whose lane groups are padded (96), and a head
// dim of 40 whose half (20) takes 4-byte vectors (bf16 only: the two-launch fallback).
void run_fused_append(DType cache_dtype, int32_t hd, int32_t q_heads, int32_t kv_heads, bool norm,
                      uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(cache_dtype)) + " hd " + std::to_string(hd) + " q/kv " +
               std::to_string(q_heads) + "/" + std::to_string(kv_heads) +
               (norm ? " norm" : ""));
  std::mt19937_64 rng(seed);
  constexpr int32_t kTokens = 19;
  constexpr int32_t kBlockSize = 16;
  constexpr int32_t kBlocks = 6;
  const int64_t stride = static_cast<int64_t>(q_heads + 2 * kv_heads) * hd;
  const size_t n = static_cast<size_t>(kTokens) * stride;
  // Values up to 6: some INT8 rows and FP8 codes saturate or round at the edges.
  const std::vector<uint16_t> qkv = random_halves(n, DType::kBF16, -6.0f, 6.0f, rng);
  std::vector<int32_t> positions(kTokens);
  std::uniform_int_distribution<int32_t> pos_dist(0, 9000);
  for (auto& pos : positions) pos = pos_dist(rng);
  std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
  for (int32_t i = 0; i < hd / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(5e5, -2.0 * i / hd));
  std::vector<int64_t> slots(kTokens);
  std::vector<int64_t> all(static_cast<size_t>(kBlocks - 1) * kBlockSize);
  std::iota(all.begin(), all.end(), int64_t{kBlockSize});  // block 0 is the null block
  std::shuffle(all.begin(), all.end(), rng);
  for (int32_t t = 0; t < kTokens; ++t) slots[t] = all[t];
  slots[5] = -1;  // padding
  Weight q_norm = make_weight(hd, DType::kBF16, 0.5f, 1.5f, rng);
  Weight k_norm = make_weight(hd, DType::kBF16, 0.5f, 1.5f, rng);
  const kv::KvLayout layout = test_kv_layout(cache_dtype, 1, kv_heads, hd, kBlockSize);
  const std::vector<uint16_t> pool0 = random_kv_pool(layout, kBlocks, rng);
  DeviceBuffer d_pos = upload(positions);
  DeviceBuffer d_inv = upload(inv_freq);
  DeviceBuffer d_slots = upload(slots);
  auto run = [&](bool fused, std::vector<uint16_t>& qkv_out, std::vector<uint16_t>& pool_out) {
    DeviceBuffer d_qkv = upload(qkv);
    DeviceBuffer d_pool = upload(pool0);
    QkNormRopeParams p;
    p.qkv = d_qkv.data();
    p.token_stride = stride;
    p.positions = d_pos.as<int32_t>();
    p.inv_freq = d_inv.as<float>();
    p.q_norm = norm ? q_norm.buf.data() : nullptr;
    p.k_norm = norm ? k_norm.buf.data() : nullptr;
    p.num_tokens = kTokens;
    p.num_q_heads = q_heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = hd;
    const PagedKvCacheView cache = layout.layer_view(d_pool.data(), 0);
    if (fused) {
      p.slot_mapping = d_slots.as<int64_t>();
      p.cache = cache;
      STRATA_ASSERT_OK(qk_norm_rope(p, nullptr));
    } else {
      STRATA_ASSERT_OK(qk_norm_rope(p, nullptr));
      KvAppendParams a;
      a.cache = cache;
      a.k = d_qkv.as<uint16_t>() + static_cast<int64_t>(q_heads) * hd;
      a.v = d_qkv.as<uint16_t>() + static_cast<int64_t>(q_heads + kv_heads) * hd;
      a.k_token_stride = a.v_token_stride = stride;
      a.slot_mapping = d_slots.as<int64_t>();
      a.num_tokens = kTokens;
      STRATA_ASSERT_OK(kv_append(a, nullptr));
    }
    sync_device();
    qkv_out = download<uint16_t>(d_qkv, n);
    pool_out = download<uint16_t>(d_pool, pool0.size());
  };
  std::vector<uint16_t> qkv_two, pool_two, qkv_fused, pool_fused;
  run(false, qkv_two, pool_two);
  run(true, qkv_fused, pool_fused);
  ASSERT_EQ(pool_two.size(), pool0.size());
  ASSERT_EQ(pool_fused.size(), pool0.size());
  EXPECT_EQ(qkv_fused, qkv_two) << "the rotated q/k differ";
  EXPECT_NE(pool_two, pool0) << "nothing was appended";
  size_t diff = 0;
  for (size_t i = 0; i < pool0.size(); ++i) diff += pool_fused[i] != pool_two[i];
  EXPECT_EQ(diff, 0u) << "16-bit words of the pool differ";
}

TEST_F(ModelOpsTest, QkNormRopeFusedAppendWritesKvAppendsBytes) {
  uint64_t seed = 700;
  for (DType d : {DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI8}) {
    for (int32_t hd : {64, 128}) {
      for (bool norm : {false, true}) run_fused_append(d, hd, 8, 2, norm, seed++);
    }
    run_fused_append(d, 128, 32, 8, false, seed++);  // Llama-3.1-8B
    run_fused_append(d, 96, 12, 4, true, seed++);    // lane groups padded
  }
  run_fused_append(DType::kBF16, 40, 4, 2, true, seed++);  // 4-byte vectors: two launches
}

TEST_F(ModelOpsTest, QkNormRopeFusedAppendChecksTheCache) {
  QkNormRopeParams p;
  DeviceBuffer qkv = upload(std::vector<uint16_t>(64 * 4, 0));
  DeviceBuffer pos = upload(std::vector<int32_t>(1, 0));
  DeviceBuffer inv = upload(std::vector<float>(32, 1.0f));
  DeviceBuffer slots = upload(std::vector<int64_t>(1, 16));
  p.qkv = qkv.data();
  p.token_stride = 64 * 3;
  p.positions = pos.as<int32_t>();
  p.inv_freq = inv.as<float>();
  p.num_tokens = 1;
  p.num_q_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  p.slot_mapping = slots.as<int64_t>();
  const kv::KvLayout layout = test_kv_layout(DType::kBF16, 1, 2, 64, 16);  // 2 KV heads
  p.cache = layout.layer_view(reinterpret_cast<void*>(uintptr_t{1} << 20), 0);
  EXPECT_EQ(qk_norm_rope(p, nullptr).code(), StatusCode::kInvalidArgument);
  const kv::KvLayout f32 = test_kv_layout(DType::kF32, 1, 1, 64, 16);
  p.cache = f32.layer_view(reinterpret_cast<void*>(uintptr_t{1} << 20), 0);
  EXPECT_EQ(qk_norm_rope(p, nullptr).code(), StatusCode::kUnsupported);
}

// ---- silu_and_mul, f32_to_bf16 ------------------------------------------------------------

void run_silu_and_mul(int32_t intermediate, int32_t num_tokens, uint64_t seed) {
  SCOPED_TRACE("intermediate " + std::to_string(intermediate) + " tokens " +
               std::to_string(num_tokens));
  std::mt19937_64 rng(seed);
  const size_t n = static_cast<size_t>(num_tokens) * intermediate;
  const std::vector<uint16_t> gate_up = random_halves(2 * n, DType::kBF16, -6.0f, 6.0f, rng);
  DeviceBuffer d_in = upload(gate_up);
  DeviceBuffer d_out = upload(std::vector<uint16_t>(n, kPoison16));
  SiluAndMulParams p;
  p.gate_up = d_in.data();
  p.out = d_out.data();
  p.num_tokens = num_tokens;
  p.intermediate = intermediate;
  STRATA_ASSERT_OK(silu_and_mul(p, nullptr));
  sync_device();
  std::vector<double> ref(n);
  for (int32_t t = 0; t < num_tokens; ++t) {
    for (int32_t i = 0; i < intermediate; ++i) {
      const size_t row = static_cast<size_t>(t) * 2 * intermediate;
      const double g = bf16_to_f32(gate_up[row + i]);
      const double u = bf16_to_f32(gate_up[row + intermediate + i]);
      ref[static_cast<size_t>(t) * intermediate + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  expect_close(ref, bf16_to_floats(download<uint16_t>(d_out, n)), op_tolerance(Op::kSiluAndMul),
               "silu_and_mul");
}

TEST_F(ModelOpsTest, SiluAndMulMatchesReference) {
  uint64_t seed = 700;
  for (int32_t inter : {64, 896, 4864, 100}) {
    for (int32_t tokens : {1, 3, 17, 257}) run_silu_and_mul(inter, tokens, seed++);
  }
}

void run_gelu_tanh_and_mul(int32_t intermediate, int32_t num_tokens, uint64_t seed) {
  SCOPED_TRACE("intermediate " + std::to_string(intermediate) + " tokens " +
               std::to_string(num_tokens));
  std::mt19937_64 rng(seed);
  const size_t n = static_cast<size_t>(num_tokens) * intermediate;
  const std::vector<uint16_t> gate_up = random_halves(2 * n, DType::kBF16, -6.0f, 6.0f, rng);
  DeviceBuffer d_in = upload(gate_up);
  DeviceBuffer d_out = upload(std::vector<uint16_t>(n, kPoison16));
  SiluAndMulParams p;
  p.gate_up = d_in.data();
  p.out = d_out.data();
  p.num_tokens = num_tokens;
  p.intermediate = intermediate;
  STRATA_ASSERT_OK(gelu_tanh_and_mul(p, nullptr));
  sync_device();
  std::vector<double> ref(n);
  const double k = std::sqrt(2.0 / M_PI);
  for (int32_t t = 0; t < num_tokens; ++t) {
    for (int32_t i = 0; i < intermediate; ++i) {
      const size_t row = static_cast<size_t>(t) * 2 * intermediate;
      const double g = bf16_to_f32(gate_up[row + i]);
      const double u = bf16_to_f32(gate_up[row + intermediate + i]);
      ref[static_cast<size_t>(t) * intermediate + i] =
          0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * u;
    }
  }
  // One bf16 rounding of an fp32 value, as silu_and_mul's.
  expect_close(ref, bf16_to_floats(download<uint16_t>(d_out, n)), op_tolerance(Op::kSiluAndMul),
               "gelu_tanh_and_mul");
}

TEST_F(ModelOpsTest, GeluTanhAndMulMatchesReference) {
  uint64_t seed = 750;
  for (int32_t inter : {64, 896, 10240, 100}) {
    for (int32_t tokens : {1, 3, 17, 257}) run_gelu_tanh_and_mul(inter, tokens, seed++);
  }
}

TEST_F(ModelOpsTest, LogitSoftcapMatchesReference) {
  std::mt19937_64 rng(770);
  for (int64_t n : {1, 1000, 262144 * 3 + 5}) {
    for (float cap : {30.0f, 2.5f}) {
      const std::vector<float> in = random_floats(static_cast<size_t>(n), -100.0f, 100.0f, rng);
      DeviceBuffer d = upload(in);
      STRATA_ASSERT_OK(logit_softcap(d.as<float>(), n, cap, nullptr));
      sync_device();
      std::vector<double> ref(in.size());
      for (size_t i = 0; i < in.size(); ++i) ref[i] = cap * std::tanh(double{in[i]} / cap);
      expect_close(ref, download<float>(d, in.size()), {1e-6, 1e-6}, "logit_softcap");
    }
  }
}

TEST_F(ModelOpsTest, F32ToBf16RoundsToNearestEven) {
  std::mt19937_64 rng(800);
  for (int64_t n : {1, 7, 8, 9, 1000003}) {
    for (int64_t offset : {0, 1}) {  // 1: unaligned, the scalar path
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      std::vector<float> in = random_floats(static_cast<size_t>(n + offset), -1e3f, 1e3f, rng);
      const float specials[] = {0.0f,
                                -0.0f,
                                std::numeric_limits<float>::infinity(),
                                std::nanf(""),
                                1.00390625f /* a tie: 1 + 2^-8 */,
                                1e-40f};
      for (size_t i = 0; i < std::size(specials) && i < in.size(); ++i) in[i] = specials[i];
      DeviceBuffer d_in = upload(in);
      DeviceBuffer d_out = upload(std::vector<uint16_t>(static_cast<size_t>(n), kPoison16));
      STRATA_ASSERT_OK(f32_to_bf16(d_in.as<float>() + offset, d_out.data(), n, nullptr));
      sync_device();
      const auto got = download<uint16_t>(d_out, static_cast<size_t>(n));
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float x = in[i + offset];
        // Any NaN is a NaN: the device's conversion makes the canonical one.
        bad += std::isnan(x) ? !std::isnan(bf16_to_f32(got[i])) : got[i] != strata::f32_to_bf16(x);
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// ---- validation (no device needed) ---------------------------------------------------------

TEST(ModelOpsValidationTest, RejectsBadParameters) {
  RmsNormParams norm;
  norm.num_rows = 1;
  norm.hidden = 64;
  norm.residual = reinterpret_cast<float*>(uintptr_t{256});
  norm.weight = norm.residual;
  norm.out = norm.residual;
  norm.delta = norm.residual;
  int32_t row = 0;
  norm.rows = &row;
  EXPECT_EQ(rms_norm(norm, nullptr).code(), StatusCode::kInvalidArgument);  // gather + delta
  norm.rows = nullptr;
  norm.delta = nullptr;
  norm.delta_weight = norm.residual;
  EXPECT_EQ(rms_norm(norm, nullptr).code(), StatusCode::kInvalidArgument);  // no delta to norm
  norm.delta_weight = nullptr;
  norm.delta = norm.residual;
  norm.weight_dtype = DType::kI8;
  EXPECT_EQ(rms_norm(norm, nullptr).code(), StatusCode::kUnsupported);
  norm.num_rows = 0;
  norm.weight_dtype = DType::kBF16;
  EXPECT_TRUE(rms_norm(norm, nullptr).ok());  // nothing to do

  EmbeddingParams emb;
  emb.table_dtype = DType::kF32;
  emb.num_tokens = 1;
  emb.hidden = 8;
  EXPECT_EQ(embedding(emb, nullptr).code(), StatusCode::kUnsupported);
  emb.table_dtype = DType::kBF16;
  EXPECT_EQ(embedding(emb, nullptr).code(), StatusCode::kInvalidArgument);  // null pointers

  QkNormRopeParams rope;
  rope.num_tokens = 1;
  rope.num_q_heads = 4;
  rope.num_kv_heads = 1;
  rope.head_dim = 63;
  rope.token_stride = 6 * 63;
  EXPECT_EQ(qk_norm_rope(rope, nullptr).code(), StatusCode::kInvalidArgument);  // odd head_dim
  rope.head_dim = 64;
  rope.token_stride = 5 * 64;  // smaller than q + k + v
  EXPECT_EQ(qk_norm_rope(rope, nullptr).code(), StatusCode::kInvalidArgument);

  SiluAndMulParams silu;
  silu.num_tokens = -1;
  silu.intermediate = 8;
  EXPECT_EQ(silu_and_mul(silu, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gelu_tanh_and_mul(silu, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(logit_softcap(nullptr, 4, 0.0f, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(embedding(EmbeddingParams{.num_tokens = 1, .hidden = 8, .scale = 0.0f}, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f32_to_bf16(nullptr, nullptr, 5, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cuda::testing

#include "kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kernels/cpu/elementwise_avx512.h"

namespace strata::cpu {
namespace {

using test_util::bit_equal;
using test_util::encode;
using test_util::hashed_uniform;
using test_util::make_view;
using test_util::round_to;
using test_util::Tolerance;

TEST(SiluAndMulTest, MatchesFloat64ReferenceIncludingExtremes) {
  std::vector<float> gate = {-100.0f, -89.0f, -20.0f, -1e-3f, 0.0f,
                             1e-3f,   5.0f,   20.0f,  88.0f,  100.0f};
  const size_t num_fixed = gate.size();
  gate.resize(40000);  // large enough to be split over threads
  for (size_t i = num_fixed; i < gate.size(); ++i) gate[i] = 8.0f * hashed_uniform(11, i);
  std::vector<float> up(gate.size());
  for (size_t i = 0; i < up.size(); ++i) up[i] = 2.0f * hashed_uniform(12, i);
  std::vector<float> out(gate.size());
  ThreadPool pool(3);
  ASSERT_TRUE(
      silu_and_mul(gate.data(), up.data(), out.data(), static_cast<int64_t>(out.size()), pool)
          .ok());
  for (size_t i = 0; i < out.size(); ++i) {
    const double g = gate[i];
    const double ref = g / (1.0 + std::exp(-g)) * up[i];
    EXPECT_LE(std::abs(out[i] - ref), Tolerance::kActivation * std::abs(ref) + 1e-30)
        << "gate " << gate[i] << " up " << up[i];
  }
  // In place over gate or over up: same bits.
  std::vector<float> g2 = gate, u2 = up;
  ASSERT_TRUE(
      silu_and_mul(g2.data(), up.data(), g2.data(), static_cast<int64_t>(g2.size()), pool).ok());
  ASSERT_TRUE(
      silu_and_mul(gate.data(), u2.data(), u2.data(), static_cast<int64_t>(u2.size()), pool).ok());
  EXPECT_TRUE(bit_equal(g2.data(), out.data(), static_cast<int64_t>(out.size())));
  EXPECT_TRUE(bit_equal(u2.data(), out.data(), static_cast<int64_t>(out.size())));
}

// The softmax numerators of attention's AVX2 path: exp(x - max) within 2 ulp of float64 over the
// whole range, denormal results within one denormal step of it (0 far below), inf past the
// largest float, the sum in its stated order (lane sums, then reduce_lanes' tree), and on a CPU
// with AVX-512 the same bits as its exp.
TEST(ExpAvx2Test, MatchesFloat64AndSumsInItsOrder) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<float> x = {-200.0f,  -104.0f, -103.9f, -95.5f, -87.4f, -87.3f,
                          -20.0f,   -1e-6f,  0.0f,    1e-6f,  0.5f,   -0.34657f,
                          0.34658f, 10.0f,   88.72f,  88.73f, 89.0f,  150.0f};
  for (size_t i = 0; i < 4000; ++i) x.push_back(-105.0f + 97.5f * (hashed_uniform(21, i) + 1.0f));
  for (const int32_t count : {1, 7, 8, 9, 16, 17, static_cast<int32_t>(x.size())}) {
    for (const float max : {0.0f, 1.5f}) {
      std::vector<float> got(x.begin(), x.begin() + count);
      const float sum = detail::exp_sub_and_sum_avx2(got.data(), count, max);
      float lanes[detail::kLanes] = {};
      for (int32_t j = 0; j < count; ++j) {
        const float arg = x[static_cast<size_t>(j)] - max;
        const double ref = std::exp(static_cast<double>(arg));
        const float e = got[static_cast<size_t>(j)];
        lanes[j % detail::kLanes] += e;
        if (ref > std::numeric_limits<float>::max()) {
          EXPECT_TRUE(std::isinf(e)) << arg;
        } else if (ref < std::numeric_limits<float>::min()) {
          EXPECT_LE(std::abs(e - ref), std::numeric_limits<float>::denorm_min()) << arg;
        } else {
          EXPECT_LE(std::abs(e - ref), 2.4e-7 * ref) << arg;
        }
      }
      EXPECT_EQ(sum, detail::reduce_lanes(lanes)) << count;
      if (cpu_supports(CpuIsa::kAvx512)) {
        std::vector<float> wide(x.begin(), x.begin() + count);
        detail::exp_sub_and_sum_avx512(wide.data(), count, max);
        EXPECT_TRUE(bit_equal(wide.data(), got.data(), count)) << count;
      }
    }
  }
}

TEST(GeluTanhAndMulTest, MatchesFloat64ReferenceIncludingExtremes) {
  std::vector<float> gate = {-100.0f, -10.0f, -3.0f, -1e-3f, 0.0f,
                             1e-3f,   0.5f,   3.0f,  10.0f,  100.0f};
  const size_t num_fixed = gate.size();
  gate.resize(40000);  // large enough to be split over threads
  for (size_t i = num_fixed; i < gate.size(); ++i) gate[i] = 8.0f * hashed_uniform(21, i);
  std::vector<float> up(gate.size());
  for (size_t i = 0; i < up.size(); ++i) up[i] = 2.0f * hashed_uniform(22, i);
  std::vector<float> out(gate.size());
  ThreadPool pool(3);
  ASSERT_TRUE(
      gelu_tanh_and_mul(gate.data(), up.data(), out.data(), static_cast<int64_t>(out.size()), pool)
          .ok());
  const double k = std::sqrt(2.0 / 3.141592653589793);
  for (size_t i = 0; i < out.size(); ++i) {
    const double g = gate[i];
    const double ref = 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * up[i];
    EXPECT_LE(std::abs(out[i] - ref), Tolerance::kActivation * std::abs(ref) + 1e-30)
        << "gate " << gate[i] << " up " << up[i];
  }
  // Not the exact (erf) GELU: at g = 3 they differ in the fourth digit.
  const double erf_gelu = 0.5 * 3.0 * (1.0 + std::erf(3.0 / std::sqrt(2.0)));
  EXPECT_GT(std::abs(out[7] / up[7] - erf_gelu), 1e-5);
  std::vector<float> in_place = gate;
  ASSERT_TRUE(gelu_tanh_and_mul(in_place.data(), up.data(), in_place.data(),
                                static_cast<int64_t>(in_place.size()), pool)
                  .ok());
  EXPECT_TRUE(bit_equal(in_place.data(), out.data(), static_cast<int64_t>(out.size())));
  EXPECT_EQ(gelu_tanh_and_mul(gate.data(), nullptr, out.data(), 3, pool).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(gelu_tanh_and_mul(gate.data(), up.data(), out.data(), -1, pool).code(),
            StatusCode::kInvalidArgument);
}

TEST(AddInplaceTest, AddsElementwiseExactly) {
  std::vector<float> dst(50000), src(50000);
  for (size_t i = 0; i < dst.size(); ++i) {
    dst[i] = hashed_uniform(13, i);
    src[i] = hashed_uniform(14, i);
  }
  std::vector<float> expected(dst.size());
  for (size_t i = 0; i < dst.size(); ++i) expected[i] = dst[i] + src[i];
  ThreadPool pool(2);
  ASSERT_TRUE(add_inplace(dst.data(), src.data(), static_cast<int64_t>(dst.size()), pool).ok());
  EXPECT_TRUE(bit_equal(dst.data(), expected.data(), static_cast<int64_t>(dst.size())));
  ASSERT_TRUE(add_inplace(src.data(), src.data(), 1, pool).ok());  // dst == src doubles
  EXPECT_EQ(src[0], 2.0f * hashed_uniform(14, 0));
  EXPECT_EQ(add_inplace(nullptr, src.data(), 3, pool).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(add_inplace(dst.data(), src.data(), -1, pool).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(silu_and_mul(dst.data(), nullptr, dst.data(), 3, pool).code(),
            StatusCode::kInvalidArgument);
}

TEST(EmbeddingTest, GathersRowsForEveryTableDType) {
  const int64_t vocab = 50, hidden = 33;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  ThreadPool pool(2);
  for (DType dtype : kCpuFloatDTypes) {
    std::vector<float> table(static_cast<size_t>(vocab * hidden));
    for (size_t i = 0; i < table.size(); ++i) table[i] = round_to(dtype, hashed_uniform(15, i));
    const std::vector<uint8_t> bytes = encode(table, dtype);
    std::vector<float> out(ids.size() * hidden);
    EmbeddingParams p;
    p.token_ids = ids.data();
    p.num_tokens = static_cast<int64_t>(ids.size());
    p.table = make_view(bytes.data(), dtype, {vocab, hidden});
    p.out = out.data();
    ASSERT_TRUE(embedding(p, pool).ok());
    for (size_t t = 0; t < ids.size(); ++t) {
      EXPECT_TRUE(bit_equal(out.data() + t * hidden, table.data() + ids[t] * hidden, hidden))
          << dtype_name(dtype) << " token " << t;
    }
  }
}

TEST(EmbeddingTest, ScaleMultipliesEveryElement) {
  const int64_t vocab = 10, hidden = 5;
  std::vector<float> table(static_cast<size_t>(vocab * hidden));
  for (size_t i = 0; i < table.size(); ++i) table[i] = hashed_uniform(16, i);
  const std::vector<int32_t> ids = {3, 9, 3};
  std::vector<float> out(ids.size() * hidden);
  ThreadPool pool(2);
  EmbeddingParams p;
  p.token_ids = ids.data();
  p.num_tokens = static_cast<int64_t>(ids.size());
  p.table = make_view(table.data(), DType::kF32, {vocab, hidden});
  p.out = out.data();
  p.scale = 55.5f;  // sqrt(3072) = 55.43 rounded to bf16, as transformers scales a bf16 Gemma
  ASSERT_TRUE(embedding(p, pool).ok());
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t i = 0; i < hidden; ++i) {
      EXPECT_EQ(out[t * hidden + i], table[ids[t] * hidden + i] * 55.5f) << t << " " << i;
    }
  }
}

TEST(EmbeddingTest, RejectsOutOfRangeIdsWithoutWriting) {
  const std::vector<float> table(4 * 3, 1.0f);
  std::vector<float> out(6, -5.0f);
  ThreadPool pool(1);
  for (int32_t bad : {-1, 4, 1 << 30}) {
    const std::vector<int32_t> ids = {1, bad};
    EmbeddingParams p;
    p.token_ids = ids.data();
    p.num_tokens = 2;
    p.table = make_view(table.data(), DType::kF32, {4, 3});
    p.out = out.data();
    EXPECT_EQ(embedding(p, pool).code(), StatusCode::kOutOfRange) << bad;
    p.token_ids = ids.data();
    p.table.dtype = DType::kI32;
    EXPECT_EQ(embedding(p, pool).code(), StatusCode::kUnsupported);
    p.table = make_view(table.data(), DType::kF32, {12});
    EXPECT_EQ(embedding(p, pool).code(), StatusCode::kInvalidArgument);
  }
  for (float v : out) EXPECT_EQ(v, -5.0f);
}

TEST(CpuCommonTest, LoadF32WidensEveryF16AndBf16PatternExactly) {
  // The conversions themselves are checked against a float64 reference in tests/core; this pins
  // the kernels' bulk loader to them for all 65536 patterns of each type.
  std::vector<uint16_t> all(0x10000);
  for (uint32_t h = 0; h <= 0xffffu; ++h) all[h] = static_cast<uint16_t>(h);
  auto check = [&](DType dtype, float (*want)(uint16_t)) {
    std::vector<float> out(all.size());
    detail::load_f32(all.data(), dtype, 0, static_cast<int64_t>(all.size()), out.data());
    for (uint32_t h = 0; h <= 0xffffu; ++h) {
      const float w = want(all[h]);
      uint32_t a, b;
      std::memcpy(&a, &out[h], 4);
      std::memcpy(&b, &w, 4);
      ASSERT_EQ(a, b) << dtype_name(dtype) << " bits " << h;
    }
  };
  check(DType::kF16, &f16_to_f32);
  check(DType::kBF16, &bf16_to_f32);
}

}  // namespace
}  // namespace strata::cpu

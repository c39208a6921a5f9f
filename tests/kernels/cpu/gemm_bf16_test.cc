// The BF16 linear path (LinearPrecision::kBf16, gemm_bf16_avx512.h): held to a float64 product of
// the BF16-rounded inputs, and to itself bit for bit across m, row positions and thread counts.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear.h"

namespace strata::cpu {
namespace {

using test_util::bit_equal;
using test_util::encode;
using test_util::hashed_uniform;
using test_util::make_view;
using test_util::rel_l2_error;
using test_util::round_to;

struct Shape {
  int64_t m, n, k;
};

struct Bf16Case {
  Bf16Case(Shape s, bool with_bias)
      : shape(s), x(static_cast<size_t>(s.m * s.k)), w(static_cast<size_t>(s.n * s.k)) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = hashed_uniform(11, i);
    for (size_t i = 0; i < w.size(); ++i) w[i] = round_to(DType::kBF16, hashed_uniform(12, i));
    w_bytes = encode(w, DType::kBF16);
    weight = make_view(w_bytes.data(), DType::kBF16, {s.n, s.k});
    if (with_bias) {
      b.resize(static_cast<size_t>(s.n));
      for (size_t i = 0; i < b.size(); ++i) b[i] = hashed_uniform(13, i);
      b_bytes = encode(b, DType::kF32);
      bias = make_view(b_bytes.data(), DType::kF32, {s.n});
    }
  }

  // x rounded to BF16 (nearest even) times the BF16 weights, in float64.
  std::vector<double> reference() const {
    std::vector<double> ref(static_cast<size_t>(shape.m * shape.n));
    for (int64_t r = 0; r < shape.m; ++r) {
      for (int64_t c = 0; c < shape.n; ++c) {
        double acc = b.empty() ? 0.0 : b[static_cast<size_t>(c)];
        for (int64_t i = 0; i < shape.k; ++i) {
          acc +=
              static_cast<double>(round_to(DType::kBF16, x[static_cast<size_t>(r * shape.k + i)])) *
              w[static_cast<size_t>(c * shape.k + i)];
        }
        ref[static_cast<size_t>(r * shape.n + c)] = acc;
      }
    }
    return ref;
  }

  Shape shape;
  std::vector<float> x, w, b;
  std::vector<uint8_t> w_bytes, b_bytes;
  TensorView weight, bias;
};

ThreadPool& pool_of(int num_threads) {
  static ThreadPool pool1(1);
  static ThreadPool pool2(2);
  static ThreadPool pool3(3);
  return num_threads == 1 ? pool1 : (num_threads == 2 ? pool2 : pool3);
}

// k tails of 1..31 (and none), n across the 6-column tile, m across the 4-row tile.
constexpr Shape kShapes[] = {{1, 1, 1},     {1, 7, 9},     {5, 13, 31},
                             {4, 6, 32},    {17, 40, 257}, {1, 130, 1000},
                             {9, 33, 4099}, {64, 12, 896}, {3, 5, 33}};

TEST(GemmBf16Test, MatchesFloat64ProductOfBf16Inputs) {
  if (!cpu_supports_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  for (const Shape& s : kShapes) {
    Bf16Case c(s, /*with_bias=*/s.k % 2 == 1);
    std::vector<float> out(static_cast<size_t>(s.m * s.n), -1.0f);
    ASSERT_TRUE(
        detail::linear_bf16(c.x.data(), c.weight, c.bias, out.data(), s.m, pool_of(2)).ok());
    const std::vector<double> ref = c.reference();
    for (int64_t r = 0; r < s.m; ++r) {
      // fp32 accumulation of exact BF16 products: the fp32 path's tolerance.
      EXPECT_LT(rel_l2_error(out.data() + r * s.n, ref.data() + r * s.n, s.n),
                test_util::Tolerance::kLinear)
          << "m=" << s.m << " n=" << s.n << " k=" << s.k << " row " << r;
    }
  }
}

TEST(GemmBf16Test, RowsBitIdenticalAloneOrInBatchAtAnyThreadCount) {
  if (!cpu_supports_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  // 70 x 896 spans two 64-row x blocks; 110 x 4864 three 52-row ones (x blocks shrink for long
  // k), the last of 6 rows ending in a 2-row rest tile.
  for (const Shape s : {Shape{37, 45, 200}, Shape{70, 13, 896}, Shape{110, 8, 4864}}) {
    Bf16Case c(s, true);
    std::vector<float> batch(static_cast<size_t>(s.m * s.n));
    ASSERT_TRUE(
        detail::linear_bf16(c.x.data(), c.weight, c.bias, batch.data(), s.m, pool_of(3)).ok());
    for (int threads : {1, 2, 3}) {
      std::vector<float> again(batch.size());
      ASSERT_TRUE(
          detail::linear_bf16(c.x.data(), c.weight, c.bias, again.data(), s.m, pool_of(threads))
              .ok());
      EXPECT_TRUE(bit_equal(batch.data(), again.data(), s.m * s.n)) << threads << " threads";
    }
    for (int64_t r = 0; r < s.m; ++r) {
      std::vector<float> alone(static_cast<size_t>(s.n));
      ASSERT_TRUE(
          detail::linear_bf16(c.x.data() + r * s.k, c.weight, c.bias, alone.data(), 1, pool_of(1))
              .ok());
      EXPECT_TRUE(bit_equal(alone.data(), batch.data() + r * s.n, s.n)) << "row " << r;
      if (r < 2) continue;
      std::vector<float> three(static_cast<size_t>(3 * s.n));
      ASSERT_TRUE(detail::linear_bf16(c.x.data() + (r - 2) * s.k, c.weight, c.bias, three.data(), 3,
                                      pool_of(2))
                      .ok());
      EXPECT_TRUE(bit_equal(three.data() + 2 * s.n, batch.data() + r * s.n, s.n)) << "row " << r;
    }
  }
}

TEST(GemmBf16Test, ScopeRoutesBf16WeightsOnlyAndRestores) {
  if (!cpu_supports_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  const Shape s{5, 9, 100};
  Bf16Case c(s, false);
  std::vector<float> fp32(static_cast<size_t>(s.m * s.n));
  std::vector<float> bf16(fp32.size());
  std::vector<float> direct(fp32.size());
  ASSERT_TRUE(linear(c.x.data(), c.weight, c.bias, fp32.data(), s.m, pool_of(2)).ok());
  {
    const LinearPrecisionScope scope(LinearPrecision::kBf16);
    EXPECT_EQ(current_linear_precision(), LinearPrecision::kBf16);
    ASSERT_TRUE(linear(c.x.data(), c.weight, c.bias, bf16.data(), s.m, pool_of(2)).ok());
    // An F32 weight keeps the exact path under the scope.
    const std::vector<uint8_t> w32 = encode(c.w, DType::kF32);
    std::vector<float> a(fp32.size()), b(fp32.size());
    ASSERT_TRUE(linear(c.x.data(), make_view(w32.data(), DType::kF32, {s.n, s.k}), TensorView{},
                       a.data(), s.m, pool_of(2))
                    .ok());
    const LinearPrecisionScope inner(LinearPrecision::kF32);
    ASSERT_TRUE(linear(c.x.data(), make_view(w32.data(), DType::kF32, {s.n, s.k}), TensorView{},
                       b.data(), s.m, pool_of(2))
                    .ok());
    EXPECT_TRUE(bit_equal(a.data(), b.data(), s.m * s.n));
  }
  EXPECT_EQ(current_linear_precision(), LinearPrecision::kF32);
  ASSERT_TRUE(
      detail::linear_bf16(c.x.data(), c.weight, c.bias, direct.data(), s.m, pool_of(1)).ok());
  EXPECT_TRUE(bit_equal(bf16.data(), direct.data(), s.m * s.n));
  // The activations' rounding shows: the two paths differ (and agree to BF16's precision).
  EXPECT_FALSE(bit_equal(bf16.data(), fp32.data(), s.m * s.n));
  std::vector<double> fp32_ref(fp32.begin(), fp32.end());
  EXPECT_LT(rel_l2_error(bf16.data(), fp32_ref.data(), s.m * s.n), 1e-2);
}

TEST(GemmBf16Test, RefusesOtherWeightDTypes) {
  const Shape s{1, 2, 8};
  std::vector<float> x(8, 1.0f), w(16, 1.0f), out(2);
  const std::vector<uint8_t> w32 = encode(w, DType::kF32);
  EXPECT_EQ(detail::linear_bf16(x.data(), make_view(w32.data(), DType::kF32, {s.n, s.k}),
                                TensorView{}, out.data(), 1, pool_of(1))
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cpu

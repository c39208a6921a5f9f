#include "kernels/cpu/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_common.h"

namespace strata::cpu {
namespace {

using test_util::bit_equal;
using test_util::encode;
using test_util::hashed_uniform;
using test_util::make_view;
using test_util::rel_l2_error;
using test_util::round_to;
using test_util::Tolerance;

struct Shape {
  int64_t m, n, k;
};

struct LinearCase {
  LinearCase(Shape s, DType weight_dtype, bool with_bias, DType bias_dtype = DType::kF32)
      : shape(s), x(static_cast<size_t>(s.m * s.k)), w(static_cast<size_t>(s.n * s.k)) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = hashed_uniform(1, i);
    for (size_t i = 0; i < w.size(); ++i) w[i] = round_to(weight_dtype, hashed_uniform(2, i));
    w_bytes = encode(w, weight_dtype);
    weight = make_view(w_bytes.data(), weight_dtype, {s.n, s.k});
    if (with_bias) {
      b.resize(static_cast<size_t>(s.n));
      for (size_t i = 0; i < b.size(); ++i) b[i] = round_to(bias_dtype, hashed_uniform(3, i));
      b_bytes = encode(b, bias_dtype);
      bias = make_view(b_bytes.data(), bias_dtype, {s.n});
    }
  }

  std::vector<double> reference() const {
    std::vector<double> ref(static_cast<size_t>(shape.m * shape.n));
    for (int64_t r = 0; r < shape.m; ++r) {
      for (int64_t c = 0; c < shape.n; ++c) {
        double acc = b.empty() ? 0.0 : b[static_cast<size_t>(c)];
        for (int64_t i = 0; i < shape.k; ++i) {
          acc += static_cast<double>(x[static_cast<size_t>(r * shape.k + i)]) *
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

constexpr Shape kShapes[] = {{1, 1, 1},     {3, 5, 7},      {2, 17, 8},   {33, 17, 64},
                             {70, 40, 257}, {2, 130, 1000}, {129, 33, 31}};

TEST(LinearTest, MatchesFloat64ReferenceForEveryWeightDType) {
  for (DType dtype : kCpuFloatDTypes) {
    for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {
      for (const Shape& s : kShapes) {
        const DType bias_dtype = bias_kind == 2 ? DType::kBF16 : DType::kF32;
        LinearCase c(s, dtype, /*with_bias=*/bias_kind > 0, bias_dtype);
        std::vector<float> out(static_cast<size_t>(s.m * s.n));
        ASSERT_TRUE(linear(c.x.data(), c.weight, c.bias, out.data(), s.m, pool_of(2)).ok());
        const std::vector<double> ref = c.reference();
        for (int64_t r = 0; r < s.m; ++r) {
          EXPECT_LT(rel_l2_error(out.data() + r * s.n, ref.data() + r * s.n, s.n),
                    Tolerance::kLinear)
              << dtype_name(dtype) << " bias " << bias_kind << " m=" << s.m << " n=" << s.n
              << " k=" << s.k << " row " << r;
        }
      }
    }
  }
}

TEST(LinearTest, BiasIsAdded) {
  // Proves the bias check can fail: with and without bias differ by exactly the bias.
  LinearCase with(Shape{2, 9, 16}, DType::kF32, true);
  LinearCase without(Shape{2, 9, 16}, DType::kF32, false);
  std::vector<float> a(18), b(18);
  ASSERT_TRUE(linear(with.x.data(), with.weight, with.bias, a.data(), 2, pool_of(1)).ok());
  ASSERT_TRUE(linear(without.x.data(), without.weight, without.bias, b.data(), 2, pool_of(1)).ok());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i] + with.b[i % 9]);
}

TEST(LinearTest, RowsBitIdenticalAloneOrInBatchAtAnyThreadCount) {
  const Shape s = {37, 45, 200};
  for (DType dtype : kCpuFloatDTypes) {
    LinearCase c(s, dtype, true);
    std::vector<float> batch(static_cast<size_t>(s.m * s.n));
    ASSERT_TRUE(linear(c.x.data(), c.weight, c.bias, batch.data(), s.m, pool_of(3)).ok());
    for (int threads : {1, 2, 3}) {
      std::vector<float> again(batch.size());
      ASSERT_TRUE(linear(c.x.data(), c.weight, c.bias, again.data(), s.m, pool_of(threads)).ok());
      EXPECT_TRUE(bit_equal(batch.data(), again.data(), s.m * s.n)) << threads << " threads";
    }
    for (int64_t r = 0; r < s.m; ++r) {
      // Alone (m = 1), and as the second row of a pair (an odd row in a 2-row tile).
      std::vector<float> alone(static_cast<size_t>(s.n));
      ASSERT_TRUE(linear(c.x.data() + r * s.k, c.weight, c.bias, alone.data(), 1, pool_of(1)).ok());
      EXPECT_TRUE(bit_equal(alone.data(), batch.data() + r * s.n, s.n)) << "row " << r;
      if (r == 0) continue;
      std::vector<float> pair(static_cast<size_t>(2 * s.n));
      ASSERT_TRUE(
          linear(c.x.data() + (r - 1) * s.k, c.weight, c.bias, pair.data(), 2, pool_of(2)).ok());
      EXPECT_TRUE(bit_equal(pair.data() + s.n, batch.data() + r * s.n, s.n)) << "row " << r;
    }
  }
}

// The paths that share the portable path's arithmetic (8 lanes, separate multiply and add):
// only the portable path itself now (AVX2 and AVX-512 fuse multiply-adds).
bool has_portable_order(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return true;
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512:
      return false;
  }
  return false;
}

TEST(LinearTest, UnfusedIsaPathsAreBitIdenticalToThePortablePath) {
  // Odd k (tails of 1..7), n not a multiple of the 4 x 2 / 1 x 4 tiles, m across the 4-row tiles;
  // k % 8 == 0 with and without bias (4 x 2 tiles reduced across registers).
  constexpr Shape kIsaShapes[] = {{1, 1, 1},     {1, 7, 9},     {5, 13, 31},
                                  {4, 6, 8},     {70, 40, 257}, {1, 130, 1000},
                                  {9, 33, 4099}, {13, 9, 64},   {12, 10, 128}};
  for (CpuIsa isa : kCpuIsas) {
    if (!cpu_supports(isa)) {
      EXPECT_EQ(detail::linear_with_isa(isa, nullptr, TensorView{}, TensorView{}, nullptr, 0,
                                        pool_of(1))
                    .code(),
                StatusCode::kInvalidArgument);
      continue;
    }
    if (!has_portable_order(isa)) continue;
    for (DType dtype : kCpuFloatDTypes) {
      for (const Shape& s : kIsaShapes) {
        LinearCase c(s, dtype, /*with_bias=*/s.k % 2 == 1 || s.m % 2 == 1, DType::kBF16);
        std::vector<float> portable(static_cast<size_t>(s.m * s.n));
        std::vector<float> fast(portable.size(), -1.0f);
        ASSERT_TRUE(detail::linear_with_isa(CpuIsa::kPortable, c.x.data(), c.weight, c.bias,
                                            portable.data(), s.m, pool_of(1))
                        .ok());
        ASSERT_TRUE(detail::linear_with_isa(isa, c.x.data(), c.weight, c.bias, fast.data(), s.m,
                                            pool_of(2))
                        .ok());
        EXPECT_TRUE(bit_equal(portable.data(), fast.data(), s.m * s.n))
            << cpu_isa_name(isa) << " " << dtype_name(dtype) << " m=" << s.m << " n=" << s.n
            << " k=" << s.k;
      }
    }
  }
}

TEST(LinearTest, BestPathIsTheWidestTheCpuRuns) {
  CpuIsa widest = CpuIsa::kPortable;
  for (CpuIsa isa : kCpuIsas) {
    if (cpu_supports(isa)) widest = isa;
  }
  EXPECT_EQ(best_cpu_isa(), widest) << cpu_isa_name(best_cpu_isa());
}

// The fused paths round differently from the portable one, so they are held to the float64
// reference (every dtype, k tails of 1..15, n not a multiple of the 6-column tile) ...
TEST(LinearTest, FusedIsaPathsMatchFloat64Reference) {
  constexpr Shape kFusedShapes[] = {{1, 1, 1},   {1, 7, 9},     {5, 13, 31},   {4, 6, 16},
                                    {17, 40, 257}, {1, 130, 1000}, {9, 33, 4099}, {64, 12, 896}};
  for (CpuIsa isa : kCpuIsas) {
    if (!cpu_supports(isa) || has_portable_order(isa)) continue;
    for (DType dtype : kCpuFloatDTypes) {
      for (const Shape& s : kFusedShapes) {
        LinearCase c(s, dtype, /*with_bias=*/s.k % 2 == 1, DType::kBF16);
        std::vector<float> out(static_cast<size_t>(s.m * s.n), -1.0f);
        ASSERT_TRUE(
            detail::linear_with_isa(isa, c.x.data(), c.weight, c.bias, out.data(), s.m, pool_of(2))
                .ok());
        const std::vector<double> ref = c.reference();
        for (int64_t r = 0; r < s.m; ++r) {
          EXPECT_LT(rel_l2_error(out.data() + r * s.n, ref.data() + r * s.n, s.n),
                    Tolerance::kLinear)
              << cpu_isa_name(isa) << " " << dtype_name(dtype) << " m=" << s.m << " n=" << s.n
              << " k=" << s.k << " row " << r;
        }
      }
    }
  }
}

// ... and to exact equality with themselves: a row's outputs do not depend on m (which changes
// the row tiles and the remainder tile it lands in, and on AVX2 whether weights are widened in
// registers or to a slab first), on its position in the batch, or on the thread count (which
// changes the column ranges and so the column tiles).
TEST(LinearTest, FusedIsaPathsBitIdenticalAcrossBatchSizesPositionsAndThreads) {
  constexpr int64_t kMaxRows = 103;
  for (CpuIsa isa : kCpuIsas) {
    if (!cpu_supports(isa) || has_portable_order(isa)) continue;
    for (DType dtype : kCpuFloatDTypes) {
      for (const Shape& s : {Shape{kMaxRows, 47, 1003}, Shape{kMaxRows, 13, 17}}) {
        LinearCase c(s, dtype, /*with_bias=*/true, DType::kBF16);
        std::vector<float> alone(static_cast<size_t>(s.m * s.n));
        for (int64_t r = 0; r < s.m; ++r) {
          ASSERT_TRUE(detail::linear_with_isa(isa, c.x.data() + r * s.k, c.weight, c.bias,
                                              alone.data() + r * s.n, 1, pool_of(1))
                          .ok());
        }
        for (int64_t m : {1, 3, 5, 6, 16, 17, 64, 100}) {
          for (int64_t first : {int64_t{0}, int64_t{3}}) {
            for (int threads : {1, 2, 3}) {
              std::vector<float> batch(static_cast<size_t>(m * s.n), -1.0f);
              ASSERT_TRUE(detail::linear_with_isa(isa, c.x.data() + first * s.k, c.weight, c.bias,
                                                  batch.data(), m, pool_of(threads))
                              .ok());
              EXPECT_TRUE(bit_equal(batch.data(), alone.data() + first * s.n, m * s.n))
                  << cpu_isa_name(isa) << " " << dtype_name(dtype) << " k=" << s.k << " m=" << m
                  << " first row " << first << " threads " << threads;
            }
          }
        }
      }
    }
  }
}

TEST(LinearTest, ZeroRowsIsANoOp) {
  LinearCase c(Shape{1, 4, 4}, DType::kF32, false);
  EXPECT_TRUE(linear(nullptr, c.weight, c.bias, nullptr, 0, pool_of(1)).ok());
}

TEST(LinearTest, RejectsBadShapesAndDTypes) {
  LinearCase c(Shape{2, 4, 8}, DType::kF32, true);
  std::vector<float> out(8, -7.0f);
  const auto code_of = [&](TensorView w, TensorView b, const float* x, int64_t m) {
    return linear(x, w, b, out.data(), m, pool_of(1)).code();
  };
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_EQ(code_of(make_view(c.w_bytes.data(), DType::kF32, {32}), c.bias, c.x.data(), 2),
            kInvalid);
  EXPECT_EQ(code_of(make_view(nullptr, DType::kF32, {4, 8}), c.bias, c.x.data(), 2), kInvalid);
  EXPECT_EQ(code_of(c.weight, make_view(c.b_bytes.data(), DType::kF32, {3}), c.x.data(), 2),
            kInvalid);
  EXPECT_EQ(code_of(c.weight, c.bias, nullptr, 2), kInvalid);
  EXPECT_EQ(code_of(c.weight, c.bias, c.x.data(), -1), kInvalid);
  EXPECT_EQ(code_of(make_view(c.w_bytes.data(), DType::kI8, {4, 8}), c.bias, c.x.data(), 2),
            StatusCode::kUnsupported);
  EXPECT_EQ(code_of(make_view(c.w_bytes.data(), DType::kF8E4M3, {4, 8}), c.bias, c.x.data(), 2),
            StatusCode::kUnsupported);
  EXPECT_EQ(code_of(c.weight, make_view(c.b_bytes.data(), DType::kI32, {4}), c.x.data(), 2),
            StatusCode::kUnsupported);
  for (float v : out) EXPECT_EQ(v, -7.0f);
}

}  // namespace
}  // namespace strata::cpu

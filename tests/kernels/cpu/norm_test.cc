#include "kernels/cpu/norm.h"

#include <gtest/gtest.h>

#include <cmath>
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

// Rows with very different magnitudes, so a missing or wrong normalisation shows.
std::vector<float> rows_of(int64_t num_rows, int64_t dim) {
  std::vector<float> x(static_cast<size_t>(num_rows * dim));
  for (int64_t r = 0; r < num_rows; ++r) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(r % 7) * 4 - 12);
    for (int64_t i = 0; i < dim; ++i) {
      x[static_cast<size_t>(r * dim + i)] =
          magnitude * hashed_uniform(5, static_cast<uint64_t>(r), static_cast<uint64_t>(i));
    }
  }
  return x;
}

std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, int64_t dim,
                              double eps) {
  std::vector<double> ref(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(dim); ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i)
      ref[r * dim + i] = x[r * dim + i] * inv * w[static_cast<size_t>(i)];
  }
  return ref;
}

TEST(RmsNormTest, MatchesFloat64ReferenceForEveryWeightDType) {
  ThreadPool pool(2);
  for (DType dtype : kCpuFloatDTypes) {
    // dim 128 with rows = tokens * heads is Qwen3's per-head q/k norm.
    for (int64_t dim : {1, 7, 64, 128, 896}) {
      const int64_t num_rows = 23;
      const std::vector<float> x = rows_of(num_rows, dim);
      std::vector<float> w(static_cast<size_t>(dim));
      for (size_t i = 0; i < w.size(); ++i)
        w[i] = round_to(dtype, 1.0f + 0.5f * hashed_uniform(6, i));
      const std::vector<uint8_t> w_bytes = encode(w, dtype);
      std::vector<float> out(x.size());
      RmsNormParams p;
      p.x = x.data();
      p.out = out.data();
      p.weight = make_view(w_bytes.data(), dtype, {dim});
      p.num_rows = num_rows;
      p.eps = 1e-6f;
      ASSERT_TRUE(rms_norm(p, pool).ok());
      const std::vector<double> ref = reference(x, w, dim, static_cast<double>(p.eps));
      for (int64_t r = 0; r < num_rows; ++r) {
        EXPECT_LT(rel_l2_error(out.data() + r * dim, ref.data() + r * dim, dim),
                  Tolerance::kRmsNorm)
            << dtype_name(dtype) << " dim " << dim << " row " << r;
      }

      // In place gives the same bits; so does each row alone on one thread.
      std::vector<float> in_place = x;
      p.x = in_place.data();
      p.out = in_place.data();
      ASSERT_TRUE(rms_norm(p, pool).ok());
      EXPECT_TRUE(bit_equal(in_place.data(), out.data(), num_rows * dim));
      ThreadPool one(1);
      std::vector<float> row(static_cast<size_t>(dim));
      p.x = x.data() + 5 * dim;
      p.out = row.data();
      p.num_rows = 1;
      ASSERT_TRUE(rms_norm(p, one).ok());
      EXPECT_TRUE(bit_equal(row.data(), out.data() + 5 * dim, dim));
    }
  }
}

TEST(RmsNormTest, EpsMatters) {
  ThreadPool pool(1);
  const std::vector<float> x = {1e-4f, -2e-4f, 3e-4f, 0.0f};
  const std::vector<float> w = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> out(4);
  RmsNormParams p;
  p.x = x.data();
  p.out = out.data();
  p.weight = make_view(w.data(), DType::kF32, {4});
  p.num_rows = 1;
  p.eps = 1e-5f;
  ASSERT_TRUE(rms_norm(p, pool).ok());
  const std::vector<double> ref = reference(x, w, 4, 1e-5);
  EXPECT_LT(rel_l2_error(out.data(), ref.data(), 4), Tolerance::kRmsNorm);
  EXPECT_GT(rel_l2_error(out.data(), reference(x, w, 4, 0.0).data(), 4), 0.1);
}

TEST(RmsNormTest, UnitOffsetMultipliesByOnePlusWeight) {
  // Gemma's norm: weights stored as offsets from 1, near zero; without the offset the output
  // would be scaled by the small weights instead.
  ThreadPool pool(2);
  for (DType dtype : kCpuFloatDTypes) {
    const int64_t dim = 64, num_rows = 9;
    const std::vector<float> x = rows_of(num_rows, dim);
    std::vector<float> w(static_cast<size_t>(dim));
    for (size_t i = 0; i < w.size(); ++i) w[i] = round_to(dtype, 0.1f * hashed_uniform(7, i));
    const std::vector<uint8_t> w_bytes = encode(w, dtype);
    std::vector<float> one_plus_w(w.size());
    for (size_t i = 0; i < w.size(); ++i) one_plus_w[i] = 1.0f + w[i];
    std::vector<float> out(x.size());
    RmsNormParams p;
    p.x = x.data();
    p.out = out.data();
    p.weight = make_view(w_bytes.data(), dtype, {dim});
    p.num_rows = num_rows;
    p.unit_offset = true;
    ASSERT_TRUE(rms_norm(p, pool).ok());
    const std::vector<double> ref = reference(x, one_plus_w, dim, static_cast<double>(p.eps));
    for (int64_t r = 0; r < num_rows; ++r) {
      EXPECT_LT(rel_l2_error(out.data() + r * dim, ref.data() + r * dim, dim), Tolerance::kRmsNorm)
          << dtype_name(dtype) << " row " << r;
    }
  }
}

TEST(RmsNormTest, RejectsBadParams) {
  ThreadPool pool(1);
  std::vector<float> x(8, 1.0f), out(8, -3.0f), w(4, 1.0f);
  const auto code_of = [&](auto mutate) {
    RmsNormParams p;
    p.x = x.data();
    p.out = out.data();
    p.weight = make_view(w.data(), DType::kF32, {4});
    p.num_rows = 2;
    mutate(p);
    return rms_norm(p, pool).code();
  };
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_EQ(code_of([](RmsNormParams& p) { p.x = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](RmsNormParams& p) { p.num_rows = -1; }), kInvalid);
  EXPECT_EQ(code_of([](RmsNormParams& p) { p.eps = -1.0f; }), kInvalid);
  EXPECT_EQ(code_of([&](RmsNormParams& p) {
              p.weight = make_view(w.data(), DType::kF32, {2, 2});
            }),
            kInvalid);
  EXPECT_EQ(code_of([&](RmsNormParams& p) { p.weight = make_view(w.data(), DType::kI8, {4}); }),
            StatusCode::kUnsupported);
  for (float v : out) EXPECT_EQ(v, -3.0f);
}

}  // namespace
}  // namespace strata::cpu

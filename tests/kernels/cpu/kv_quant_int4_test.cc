// The INT4 (KIVI) encoder (kv_quant.h) against the documented formulas written out independently
// (int4_reference.h): statistics and codes bit for bit, the s / 2 error bound, the edge cases, and
// the AVX-512 decoders against the portable ones.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "int4_reference.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/kv_quant_avx512.h"

namespace strata::cpu {
namespace {

using test_util::hashed_uniform;
using test_util::int4_reference;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Encodes x with the kernels' encoder, checks it against the reference bit for bit, and returns
// the values read back.
std::vector<float> round_trip(const std::vector<float>& x, Int4Params* out = nullptr) {
  const auto n = static_cast<int64_t>(x.size());
  const Int4Params p = int4_params(x.data(), n, 1);
  const test_util::Int4Group want = int4_reference(x.data(), n, 1);
  EXPECT_EQ(p.scale, want.scale);
  EXPECT_EQ(p.zero, want.zero);
  const float s = f16_to_f32(p.scale);
  const float z = f16_to_f32(p.zero);
  std::vector<float> read;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t code = int4_code(x[i], s, z);
    EXPECT_EQ(code, want.codes[i]) << "element " << i << " = " << x[i];
    EXPECT_LE(code, 15);
    const float r = int4_value(code, s, z);
    const float r_ref = test_util::int4_read(code, p.scale, p.zero);
    EXPECT_EQ(std::memcmp(&r, &r_ref, sizeof(float)), 0);
    read.push_back(r);
  }
  if (out != nullptr) *out = p;
  return read;
}

TEST(Int4EncodingTest, RandomGroupsMatchTheFormulaAndReadBackWithinHalfAStep) {
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = trial % 2 == 0 ? 16 : 128;  // a K channel of a block, a V row
    const float offset = 20.0f * hashed_uniform(7, trial, 1);
    const float spread = std::exp2(8.0f * hashed_uniform(7, trial, 2) - 4.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = offset + spread * hashed_uniform(7, trial, 3 + i);
    }
    Int4Params p;
    const std::vector<float> read = round_trip(x, &p);
    const float s = f16_to_f32(p.scale);
    const float z = f16_to_f32(p.zero);
    // z <= min and max <= z + 15 s: every value within s / 2 (plus the fp32 rounding of the
    // division and of code * s + z).
    const float mn = *std::min_element(x.begin(), x.end());
    const float mx = *std::max_element(x.begin(), x.end());
    ASSERT_LE(z, mn);
    ASSERT_GE(15.0 * s * (1 + 1e-6), static_cast<double>(mx) - z);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::abs(read[i] - x[i]), 0.5f * s + 4e-7f * (std::abs(x[i]) + 15 * s))
          << "trial " << trial << " element " << i;
    }
    ASSERT_EQ(int4_code(mx, s, z), 15) << "trial " << trial;
  }
}

TEST(Int4EncodingTest, ConstantGroups) {
  // An fp16 value: zero point = the value, scale 0, every code 0, read back exactly.
  Int4Params p;
  std::vector<float> read = round_trip(std::vector<float>(16, 0.5f), &p);
  EXPECT_EQ(p.scale, 0);
  EXPECT_EQ(f16_to_f32(p.zero), 0.5f);
  for (float r : read) EXPECT_EQ(r, 0.5f);
  // Not an fp16 value: the zero point is the fp16 below, and the tiny scale reaches the value.
  read = round_trip(std::vector<float>(16, 0.1f), &p);
  EXPECT_LT(f16_to_f32(p.zero), 0.1f);
  EXPECT_GT(p.scale, 0);
  for (float r : read) EXPECT_NEAR(r, 0.1f, 0.5f * f16_to_f32(p.scale) + 1e-8f);
  // All zeros, and -0: zero point +0 (never -0), scale 0.
  round_trip(std::vector<float>(16, 0.0f), &p);
  EXPECT_EQ(p.zero, 0);
  EXPECT_EQ(p.scale, 0);
  round_trip({-0.0f, 0.0f, -0.0f, 1.0f}, &p);
  EXPECT_EQ(p.zero, 0);
}

TEST(Int4EncodingTest, NaNsAreIgnoredAndEncodeAsZero) {
  Int4Params p;
  std::vector<float> x = {1.0f, kNaN, 3.0f, -2.0f, kNaN, 0.25f};
  round_trip(x, &p);
  EXPECT_EQ(f16_to_f32(p.zero), -2.0f);
  EXPECT_EQ(int4_code(kNaN, f16_to_f32(p.scale), f16_to_f32(p.zero)), 0);
  // All NaN: statistics 0, codes 0, reads 0.
  const std::vector<float> read = round_trip(std::vector<float>(8, kNaN), &p);
  EXPECT_EQ(p.scale, 0);
  EXPECT_EQ(p.zero, 0);
  for (float r : read) EXPECT_EQ(r, 0.0f);
  EXPECT_EQ(int4_params(x.data(), 0, 1).scale, 0);  // an empty group
}

TEST(Int4EncodingTest, HugeAndInfiniteValuesSaturateWithoutUndefinedConversions) {
  Int4Params p;
  // Beyond fp16: zero point -65504, scale 65504 (both clamped finite); the codes saturate.
  std::vector<float> read = round_trip({1e6f, -1e6f, 0.0f, 3e5f}, &p);
  EXPECT_EQ(f16_to_f32(p.zero), -65504.0f);
  EXPECT_EQ(f16_to_f32(p.scale), 65504.0f);
  for (float r : read) EXPECT_TRUE(std::isfinite(r));
  read = round_trip({INFINITY, -INFINITY, 1.0f}, &p);
  EXPECT_EQ(f16_to_f32(p.zero), -65504.0f);
  EXPECT_EQ(f16_to_f32(p.scale), 65504.0f);
  EXPECT_EQ(int4_code(INFINITY, 65504.0f, -65504.0f), 15);
  EXPECT_EQ(int4_code(-INFINITY, 65504.0f, -65504.0f), 0);
  // Every value -inf: the zero point -65504 and scale 0.
  round_trip({-INFINITY, -INFINITY}, &p);
  EXPECT_EQ(f16_to_f32(p.zero), -65504.0f);
  EXPECT_EQ(p.scale, 0);
  // Within range but large: a 60,000-wide group keeps a finite scale.
  round_trip({-30000.0f, 30000.0f, 12.0f}, &p);
  EXPECT_TRUE(std::isfinite(f16_to_f32(p.scale)));
}

TEST(Int4EncodingTest, NegativeOnlyAndOffsetGroups) {
  Int4Params p;
  std::vector<float> read = round_trip({-3.0f, -1.0f, -2.5f, -1.75f}, &p);
  EXPECT_LE(f16_to_f32(p.zero), -3.0f);
  EXPECT_NEAR(read[1], -1.0f, 0.5f * f16_to_f32(p.scale));
  // A channel far from zero with a small spread (an outlier K channel): the fp16 zero point is
  // the fp16 below the min, so no value falls below code 0 and the error stays within s / 2.
  std::vector<float> x;
  for (int i = 0; i < 16; ++i) x.push_back(300.0f + 0.3f * hashed_uniform(11, i));
  read = round_trip(x, &p);
  const float s = f16_to_f32(p.scale);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::abs(read[i] - x[i]), 0.5f * s + 1e-4f);
}

TEST(Int4EncodingTest, Avx512DecodersGiveThePortableBits) {
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (const int64_t n : {int64_t{2}, int64_t{24}, int64_t{64}, int64_t{72}, int64_t{128}}) {
    std::vector<uint8_t> codes(static_cast<size_t>(n / 2));
    std::vector<uint16_t> scales(static_cast<size_t>(n));
    std::vector<uint16_t> zeros(static_cast<size_t>(n));
    for (int64_t i = 0; i < n / 2; ++i) {
      codes[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + n) & 0xFF);
    }
    for (int64_t i = 0; i < n; ++i) {
      // Normal and subnormal fp16 scales; zero points of both signs.
      scales[static_cast<size_t>(i)] =
          i % 5 == 0 ? static_cast<uint16_t>(i + 1) : f32_to_f16(0.3f + hashed_uniform(3, i));
      zeros[static_cast<size_t>(i)] = f32_to_f16(5.0f * hashed_uniform(4, i));
    }
    std::vector<float> got(static_cast<size_t>(n) + 1, -7.0f);
    detail::dequantize_int4_avx512(codes.data(), scales.data(), zeros.data(), n, got.data());
    std::vector<float> row(static_cast<size_t>(n) + 1, -7.0f);
    const float s1 = f16_to_f32(scales[1]);
    const float z1 = f16_to_f32(zeros[1]);
    detail::dequantize_int4_row_avx512(codes.data(), s1, z1, n, row.data());
    for (int64_t i = 0; i < n; ++i) {
      const auto code =
          static_cast<uint8_t>((codes[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 0x0F);
      const auto k = static_cast<size_t>(i);
      const float want = int4_value(code, f16_to_f32(scales[k]), f16_to_f32(zeros[k]));
      const float want_row = int4_value(code, s1, z1);
      EXPECT_EQ(std::memcmp(&got[k], &want, sizeof(float)), 0) << "n " << n << " i " << i;
      EXPECT_EQ(std::memcmp(&row[k], &want_row, sizeof(float)), 0) << "n " << n << " i " << i;
    }
    EXPECT_EQ(got[static_cast<size_t>(n)], -7.0f);  // the masked tail wrote nothing more
    EXPECT_EQ(row[static_cast<size_t>(n)], -7.0f);
  }
}

}  // namespace
}  // namespace strata::cpu

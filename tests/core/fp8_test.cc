// fp8 e4m3 / e5m2 <-> fp32: every one of the 256 codes of each format against an independent
// decoding from the bit fields, round trips, round-to-nearest-even at every midpoint between
// neighbouring codes, and saturation (OCP / NVIDIA __NV_SATFINITE semantics).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace strata {
namespace {

struct Format {
  const char* name;
  int man_bits;
  int bias;
  bool has_inf;
  float max;
  float (*decode)(uint8_t);
  uint8_t (*encode)(float);
};

const Format kE4M3{"e4m3", 3, 7, false, 448.0f, fp8_e4m3_to_f32, f32_to_fp8_e4m3};
const Format kE5M2{"e5m2", 2, 15, true, 57344.0f, fp8_e5m2_to_f32, f32_to_fp8_e5m2};

// Decodes by the textbook formula in double: (-1)^s * 2^(e - bias) * (1 + m / 2^M), subnormals
// 2^(1 - bias) * m / 2^M.
double reference_value(const Format& f, int code, bool* is_nan, bool* is_inf) {
  const int exp_bits = 7 - f.man_bits;
  const int e = (code >> f.man_bits) & ((1 << exp_bits) - 1);
  const int m = code & ((1 << f.man_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  *is_nan = false;
  *is_inf = false;
  if (f.has_inf && e == (1 << exp_bits) - 1) {
    *is_nan = m != 0;
    *is_inf = m == 0;
    return sign * std::numeric_limits<double>::infinity();
  }
  if (!f.has_inf && (code & 0x7f) == 0x7f) {
    *is_nan = true;
    return 0.0;
  }
  const double frac = static_cast<double>(m) / (1 << f.man_bits);
  if (e == 0) return sign * std::ldexp(frac, 1 - f.bias);
  return sign * std::ldexp(1.0 + frac, e - f.bias);
}

class Fp8Test : public ::testing::TestWithParam<Format> {};

TEST_P(Fp8Test, EveryCodeDecodesLikeTheBitFieldsSay) {
  const Format& f = GetParam();
  int nan_codes = 0;
  for (int code = 0; code < 256; ++code) {
    bool is_nan = false;
    bool is_inf = false;
    const double want = reference_value(f, code, &is_nan, &is_inf);
    const float got = f.decode(static_cast<uint8_t>(code));
    if (is_nan) {
      ++nan_codes;
      EXPECT_TRUE(std::isnan(got)) << f.name << " code " << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << f.name << " code " << code;
    EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << f.name << " code " << code;
  }
  EXPECT_EQ(nan_codes, f.has_inf ? 6 : 2);  // e5m2: 3 mantissas x 2 signs; e4m3fn: 0x7f, 0xff
  EXPECT_EQ(f.decode(f.encode(1e30f)), f.max);
}

TEST_P(Fp8Test, EveryFiniteCodeRoundTrips) {
  const Format& f = GetParam();
  for (int code = 0; code < 256; ++code) {
    const float v = f.decode(static_cast<uint8_t>(code));
    if (!std::isfinite(v)) continue;
    EXPECT_EQ(f.encode(v), code) << f.name << " value " << v;
  }
}

TEST_P(Fp8Test, MidpointsRoundToEvenAndNeighboursToTheNearest) {
  const Format& f = GetParam();
  // Positive finite codes in increasing value order are 0x00, 0x01, ... up to the max's code.
  const uint8_t max_code = f.encode(f.max);
  for (int c = 0; c < max_code; ++c) {
    const float lo = f.decode(static_cast<uint8_t>(c));
    const float hi = f.decode(static_cast<uint8_t>(c + 1));
    ASSERT_LT(lo, hi);
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact in fp32
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(f.encode(mid), even) << f.name << " midpoint of " << c;
    EXPECT_EQ(f.encode(-mid), 0x80 | even) << f.name << " -midpoint of " << c;
    EXPECT_EQ(f.encode(std::nextafter(mid, 0.0f)), c) << f.name << " below midpoint " << c;
    EXPECT_EQ(f.encode(std::nextafter(mid, 1e9f)), c + 1) << f.name << " above midpoint " << c;
  }
}

TEST_P(Fp8Test, SaturatesBeyondTheLargestFiniteAndKeepsNan) {
  const Format& f = GetParam();
  const uint8_t max_code = f.encode(f.max);
  EXPECT_EQ(f.decode(max_code), f.max);
  for (const float big : {f.max * 1.0001f, f.max * 1.5f, f.max * 4.0f, 3e38f,
                          std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f.encode(big), max_code) << f.name << " " << big;
    EXPECT_EQ(f.encode(-big), 0x80 | max_code) << f.name << " " << -big;
  }
  EXPECT_TRUE(std::isnan(f.decode(f.encode(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f.encode(0.0f), 0x00);
  EXPECT_EQ(f.encode(-0.0f), 0x80);
  const float tiny = f.decode(1);       // smallest subnormal
  EXPECT_EQ(f.encode(tiny / 2), 0x00);  // tie to even: zero
  EXPECT_EQ(f.encode(std::nextafter(tiny / 2, 1.0f)), 1);
  EXPECT_EQ(f.encode(1e-30f), 0x00);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(kE4M3, kE5M2),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Fp8Test, KnownCodes) {
  EXPECT_EQ(f32_to_fp8_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-2.0f), 0xc0);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_to_fp8_e5m2(1.0f), 0x3c);
  EXPECT_EQ(f32_to_fp8_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
}

}  // namespace
}  // namespace strata

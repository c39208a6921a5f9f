#include "core/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>

namespace strata {
namespace {

// ---- independent references: values computed in double from the IEEE formats' definitions -----

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

float bits_to_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t f32_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

bool is_f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// A binary16/bfloat16-like format: exponent bits, mantissa bits, bias.
struct Format {
  int exp_bits;
  int mant_bits;
  int bias;
  int min_normal_exp() const { return 1 - bias; }
  int max_exp() const { return (1 << exp_bits) - 2 - bias; }
};
constexpr Format kF16{5, 10, 15};
constexpr Format kBF16{8, 7, 127};

// Value of a non-NaN pattern of the format.
double ref_value(Format fmt, uint16_t h) {
  const int sign_shift = fmt.exp_bits + fmt.mant_bits;
  const bool negative = ((h >> sign_shift) & 1u) != 0;
  const uint32_t e = (h >> fmt.mant_bits) & ((1u << fmt.exp_bits) - 1u);
  const uint32_t m = h & ((1u << fmt.mant_bits) - 1u);
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), fmt.min_normal_exp() - fmt.mant_bits);
  } else if (e == (1u << fmt.exp_bits) - 1u) {
    v = kInf;  // callers never pass NaN
  } else {
    v = std::ldexp(static_cast<double>((1u << fmt.mant_bits) + m),
                   static_cast<int>(e) - fmt.bias - fmt.mant_bits);
  }
  return negative ? -v : v;
}

// The pattern IEEE round-to-nearest-even gives for a finite or infinite, non-NaN x.
uint16_t ref_encode(Format fmt, float x) {
  const uint16_t sign =
      std::signbit(x) ? static_cast<uint16_t>(1u << (fmt.exp_bits + fmt.mant_bits)) : 0;
  const uint16_t inf = static_cast<uint16_t>(sign | (((1u << fmt.exp_bits) - 1u) << fmt.mant_bits));
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return inf;
  if (a == 0.0) return sign;
  int frexp_exp;
  std::frexp(a, &frexp_exp);  // a = f * 2^frexp_exp, f in [0.5, 1)
  const int exp = std::max(frexp_exp - 1, fmt.min_normal_exp());
  const double quantum = std::ldexp(1.0, exp - fmt.mant_bits);
  const double q = std::nearbyint(a / quantum);  // exact division; ties to even
  const double r = q * quantum;
  if (r >= std::ldexp(1.0, fmt.max_exp() + 1)) return inf;
  if (r < std::ldexp(1.0, fmt.min_normal_exp())) {
    // Subnormal (or the smallest normal, which q == 2^mant_bits encodes correctly too).
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  int r_exp;
  std::frexp(r, &r_exp);
  const int e = r_exp - 1;
  const auto m = static_cast<uint32_t>(std::ldexp(r, fmt.mant_bits - e)) - (1u << fmt.mant_bits);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e + fmt.bias) << fmt.mant_bits) | m);
}

// ---- fp16 ---------------------------------------------------------------------------------------

TEST(DTypeF16Test, ToF32IsExactForEveryNonNanPattern) {
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto h = static_cast<uint16_t>(p);
    if (is_f16_nan(h)) continue;
    const float f = f16_to_f32(h);
    ASSERT_EQ(static_cast<double>(f), ref_value(kF16, h)) << std::hex << "pattern 0x" << p;
    ASSERT_EQ(std::signbit(f), (p & 0x8000u) != 0) << std::hex << "pattern 0x" << p;
  }
}

TEST(DTypeF16Test, RoundTripThroughF32IsIdentityForEveryNonNanPattern) {
  int checked = 0;
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto h = static_cast<uint16_t>(p);
    if (is_f16_nan(h)) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(h)), h) << std::hex << "pattern 0x" << p;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);  // 1023 NaN mantissas per sign
}

TEST(DTypeF16Test, EveryNanPatternStaysNanWithItsSign) {
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto h = static_cast<uint16_t>(p);
    if (!is_f16_nan(h)) continue;
    const float f = f16_to_f32(h);
    ASSERT_TRUE(std::isnan(f)) << std::hex << "pattern 0x" << p;
    ASSERT_EQ(std::signbit(f), (p & 0x8000u) != 0);
    const uint16_t back = f32_to_f16(f);
    ASSERT_TRUE(is_f16_nan(back)) << std::hex << "pattern 0x" << p << " -> 0x" << back;
    ASSERT_EQ(back & 0x8000u, p & 0x8000u);
  }
}

TEST(DTypeF16Test, F32NanBecomesQuietNanKeepingSign) {
  for (const uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7f802000u, 0xffc00000u,
                              0xff800001u, 0xffffffffu}) {
    const uint16_t h = f32_to_f16(bits_to_f32(bits));
    EXPECT_TRUE(is_f16_nan(h)) << std::hex << bits << " -> " << h;
    EXPECT_NE(h & 0x0200u, 0u) << "quiet bit";
    EXPECT_EQ((h & 0x8000u) != 0, (bits & 0x80000000u) != 0);
  }
}

TEST(DTypeF16Test, HalfwayCasesRoundToNearestEven) {
  // Between every pair of adjacent finite patterns (and between the largest finite and the
  // power of two where inf begins) the midpoint goes to the even pattern; one fp32 ulp either
  // side goes to the nearer one. Midpoints need 12 significant bits: exact in fp32.
  for (const uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t p = 0; p < 0x7c00u; ++p) {
      const auto lo = static_cast<uint16_t>(sign | p);
      const auto hi = static_cast<uint16_t>(sign | (p + 1));
      const double lo_v = ref_value(kF16, lo);
      const double hi_v = (p + 1 == 0x7c00u) ? (sign ? -65536.0 : 65536.0) : ref_value(kF16, hi);
      const auto mid = static_cast<float>((lo_v + hi_v) / 2);
      ASSERT_EQ(static_cast<double>(mid), (lo_v + hi_v) / 2);
      const uint16_t even = (p & 1u) ? hi : lo;
      ASSERT_EQ(f32_to_f16(mid), even) << std::hex << "between 0x" << lo << " and 0x" << hi;
      const float toward_lo = std::nextafter(mid, static_cast<float>(lo_v));
      const float toward_hi = std::nextafter(mid, sign ? -kInfF : kInfF);
      ASSERT_EQ(f32_to_f16(toward_lo), lo) << std::hex << "just above 0x" << lo;
      ASSERT_EQ(f32_to_f16(toward_hi), hi) << std::hex << "just below 0x" << hi;
    }
  }
}

TEST(DTypeF16Test, RandomF32ValuesRoundLikeTheReference) {
  std::mt19937 rng(20240601);
  std::uniform_int_distribution<uint32_t> any_bits;
  // Exponents 0x60..0x90 cover fp16's subnormals, normals and overflow; mantissas are random.
  std::uniform_int_distribution<uint32_t> exp_dist(0x60, 0x90);
  for (int i = 0; i < (1 << 18); ++i) {
    uint32_t bits = any_bits(rng);
    if (i % 4 != 0) bits = (bits & 0x807fffffu) | (exp_dist(rng) << 23);
    const float x = bits_to_f32(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_f16(x), ref_encode(kF16, x)) << std::hex << "f32 bits 0x" << bits;
  }
}

TEST(DTypeF16Test, SpecialValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x8000), 0.0f);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  // Largest finite, and the overflow threshold (midpoint to 2^16 rounds to even = inf).
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
}

TEST(DTypeF16Test, Subnormals) {
  const float min_sub = std::ldexp(1.0f, -24);
  EXPECT_EQ(f16_to_f32(0x0001), min_sub);
  EXPECT_EQ(f16_to_f32(0x8001), -min_sub);
  EXPECT_EQ(f16_to_f32(0x03ff), 1023.0f * min_sub);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f32_to_f16(min_sub), 0x0001);
  EXPECT_EQ(f32_to_f16(min_sub / 2), 0x0000);                        // tie -> even (0)
  EXPECT_EQ(f32_to_f16(-min_sub / 2), 0x8000);                       // keeps the sign
  EXPECT_EQ(f32_to_f16(std::nextafter(min_sub / 2, 1.0f)), 0x0001);  // above the tie
  EXPECT_EQ(f32_to_f16(3 * min_sub / 2), 0x0002);                    // tie -> even (2)
  EXPECT_EQ(f32_to_f16(1023.5f * min_sub), 0x0400);                  // tie -> smallest normal
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);  // fp32 subnormal
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::denorm_min()), 0x8000);
}

// ---- bf16 ---------------------------------------------------------------------------------------

TEST(DTypeBF16Test, ToF32IsExactForEveryNonNanPattern) {
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto h = static_cast<uint16_t>(p);
    if (is_bf16_nan(h)) continue;
    const float f = bf16_to_f32(h);
    ASSERT_EQ(static_cast<double>(f), ref_value(kBF16, h)) << std::hex << "pattern 0x" << p;
    ASSERT_EQ(f32_to_bits(f), p << 16);
  }
}

TEST(DTypeBF16Test, RoundTripThroughF32IsIdentityForEveryNonNanPattern) {
  int checked = 0;
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto h = static_cast<uint16_t>(p);
    if (is_bf16_nan(h)) continue;
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(h)), h) << std::hex << "pattern 0x" << p;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 127);
}

TEST(DTypeBF16Test, EveryNanPatternStaysNanWithItsSign) {
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto h = static_cast<uint16_t>(p);
    if (!is_bf16_nan(h)) continue;
    const float f = bf16_to_f32(h);
    ASSERT_TRUE(std::isnan(f));
    const uint16_t back = f32_to_bf16(f);
    ASSERT_TRUE(is_bf16_nan(back)) << std::hex << "pattern 0x" << p << " -> 0x" << back;
    ASSERT_EQ(back & 0x8000u, p & 0x8000u);
  }
}

TEST(DTypeBF16Test, F32NanWithPayloadOnlyInLowBitsStaysNan) {
  // Plain rounding would carry 0x7f800001 into +inf; it must stay a (quiet) NaN.
  for (const uint32_t bits : {0x7f800001u, 0x7f807fffu, 0x7f808000u, 0x7fffffffu, 0x7fc00000u,
                              0xff800001u, 0xffffffffu}) {
    const uint16_t h = f32_to_bf16(bits_to_f32(bits));
    EXPECT_TRUE(is_bf16_nan(h)) << std::hex << bits << " -> " << h;
    EXPECT_NE(h & 0x0040u, 0u) << "quiet bit";
    EXPECT_EQ((h & 0x8000u) != 0, (bits & 0x80000000u) != 0);
  }
}

TEST(DTypeBF16Test, HalfwayCasesRoundToNearestEven) {
  // bf16 is the top half of an fp32, so the midpoint above pattern p is p << 16 | 0x8000.
  for (const uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t p = 0; p < 0x7f80u; ++p) {
      const auto lo = static_cast<uint16_t>(sign | p);
      const auto hi = static_cast<uint16_t>(sign | (p + 1));
      const uint32_t mid_bits = (static_cast<uint32_t>(lo) << 16) | 0x8000u;
      const uint16_t even = (p & 1u) ? hi : lo;
      ASSERT_EQ(f32_to_bf16(bits_to_f32(mid_bits)), even) << std::hex << "mid 0x" << mid_bits;
      ASSERT_EQ(f32_to_bf16(bits_to_f32(mid_bits - 1)), lo) << std::hex << "mid 0x" << mid_bits;
      ASSERT_EQ(f32_to_bf16(bits_to_f32(mid_bits + 1)), hi) << std::hex << "mid 0x" << mid_bits;
    }
  }
}

TEST(DTypeBF16Test, RandomF32ValuesRoundLikeTheReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < (1 << 18); ++i) {
    const uint32_t bits = any_bits(rng);
    const float x = bits_to_f32(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_bf16(x), ref_encode(kBF16, x)) << std::hex << "f32 bits 0x" << bits;
  }
}

TEST(DTypeBF16Test, SpecialValues) {
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-3.0f), 0xc040);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // above the last midpoint
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(bf16_to_f32(0x7f7f), bits_to_f32(0x7f7f0000u));  // largest finite
  // Subnormals: fp32 subnormals map onto bf16 subnormals, ties to even.
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00010000u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00008000u)), 0x0000);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x007fffffu)), 0x0080);  // rounds up into the normals
}

// ---- size, name, parse --------------------------------------------------------------------------

constexpr std::array kAllDTypes = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                                   DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                                   DType::kI16,    DType::kI8,     DType::kU8,  DType::kBool};

TEST(DTypeTest, SizeOfEveryDType) {
  static_assert(dtype_size(DType::kBF16) == 2, "dtype_size is usable in constant expressions");
  EXPECT_EQ(dtype_size(DType::kF64), 8);
  EXPECT_EQ(dtype_size(DType::kF32), 4);
  EXPECT_EQ(dtype_size(DType::kF16), 2);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1);
  EXPECT_EQ(dtype_size(DType::kF8E5M2), 1);
  EXPECT_EQ(dtype_size(DType::kI64), 8);
  EXPECT_EQ(dtype_size(DType::kI32), 4);
  EXPECT_EQ(dtype_size(DType::kI16), 2);
  EXPECT_EQ(dtype_size(DType::kI8), 1);
  EXPECT_EQ(dtype_size(DType::kU8), 1);
  EXPECT_EQ(dtype_size(DType::kBool), 1);
}

TEST(DTypeTest, NamesAreTheSafetensorsSpellings) {
  EXPECT_EQ(dtype_name(DType::kF64), "F64");
  EXPECT_EQ(dtype_name(DType::kF32), "F32");
  EXPECT_EQ(dtype_name(DType::kF16), "F16");
  EXPECT_EQ(dtype_name(DType::kBF16), "BF16");
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_name(DType::kF8E5M2), "F8_E5M2");
  EXPECT_EQ(dtype_name(DType::kI64), "I64");
  EXPECT_EQ(dtype_name(DType::kI32), "I32");
  EXPECT_EQ(dtype_name(DType::kI16), "I16");
  EXPECT_EQ(dtype_name(DType::kI8), "I8");
  EXPECT_EQ(dtype_name(DType::kU8), "U8");
  EXPECT_EQ(dtype_name(DType::kBool), "BOOL");
}

TEST(DTypeTest, EveryNameParsesBackToItsDType) {
  std::set<std::string> names;
  for (const DType t : kAllDTypes) {
    const std::string_view name = dtype_name(t);
    names.emplace(name);
    const std::optional<DType> parsed = dtype_from_safetensors_name(name);
    ASSERT_TRUE(parsed.has_value()) << name;
    EXPECT_EQ(*parsed, t) << name;
  }
  EXPECT_EQ(names.size(), kAllDTypes.size()) << "names are distinct";
}

TEST(DTypeTest, UnknownNamesDoNotParse) {
  for (const std::string_view name :
       {"", "f32", "Bf16", "FP32", "F8_E4M3FN", "BF16 ", " F32", "I4", "F", "BOOLEAN"}) {
    EXPECT_FALSE(dtype_from_safetensors_name(name).has_value()) << "'" << name << "'";
  }
  EXPECT_FALSE(dtype_from_safetensors_name(std::string_view("F32\0", 4)).has_value());
}

TEST(DTypeTest, NameOfAnOutOfRangeValueIsAQuestionMark) {
  EXPECT_EQ(dtype_name(static_cast<DType>(200)), "?");
}

}  // namespace
}  // namespace strata

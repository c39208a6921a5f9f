#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace strata {
namespace {

constexpr std::array<std::pair<DType, std::string_view>, 12> kNames = {{
    {DType::kF64, "F64"},
    {DType::kF32, "F32"},
    {DType::kF16, "F16"},
    {DType::kBF16, "BF16"},
    {DType::kF8E4M3, "F8_E4M3"},
    {DType::kF8E5M2, "F8_E5M2"},
    {DType::kI64, "I64"},
    {DType::kI32, "I32"},
    {DType::kI16, "I16"},
    {DType::kI8, "I8"},
    {DType::kU8, "U8"},
    {DType::kBool, "BOOL"},
}};
// I4 (packed KV codes) is not a safetensors dtype: named, but never parsed.
constexpr std::string_view kI4Name = "I4";

}  // namespace

std::string_view dtype_name(DType t) {
  if (t == DType::kI4) return kI4Name;
  for (const auto& [type, name] : kNames) {
    if (type == t) return name;
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& [type, n] : kNames) {
    if (n == name) return type;
  }
  return std::nullopt;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs_bits > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs_bits < 0x38800000u) {
    // Subnormal or zero in fp16: round |f| * 2^24 to the nearest integer, ties to even.
    float magnitude;
    std::memcpy(&magnitude, &abs_bits, sizeof(magnitude));
    const float scaled = magnitude * 16777216.0f;  // exact: power of two
    const auto m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  // Normal: rebias the exponent and round the mantissa to 10 bits, ties to even.
  uint32_t h = ((abs_bits - 0x38000000u) >> 13);
  const uint32_t remainder = abs_bits & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

namespace {

// One OCP fp8 format: kManBits mantissa bits, exponent bias kBias.
template <int kManBits, int kBias>
struct Fp8Format {
  static constexpr int kMinExp = 1 - kBias;  // exponent of the smallest normal

  static float decode(uint8_t code, bool has_inf) {
    const bool negative = (code & 0x80u) != 0;
    const int exp_field = (code & 0x7fu) >> kManBits;
    const int man = code & ((1 << kManBits) - 1);
    const int max_exp_field = (1 << (7 - kManBits)) - 1;
    float magnitude = 0.0f;
    if (has_inf && exp_field == max_exp_field) {  // e5m2: inf or NaN
      magnitude = man == 0 ? INFINITY : NAN;
    } else if (!has_inf && (code & 0x7fu) == 0x7fu) {  // e4m3fn: the only NaN
      magnitude = NAN;
    } else if (exp_field == 0) {
      magnitude = std::ldexp(static_cast<float>(man), kMinExp - kManBits);
    } else {
      magnitude = std::ldexp(static_cast<float>((1 << kManBits) | man),
                             exp_field - kBias - kManBits);
    }
    return negative ? -magnitude : magnitude;
  }

  // Largest finite code without sign: e4m3 0x7E (448), e5m2 0x7B (57344).
  static constexpr uint32_t kMaxCode = kManBits == 3 ? 0x7eu : 0x7bu;

  // Round to nearest even on the bits (like f32_to_f16), saturating: any |f| >= max, infinities
  // included, gives the largest finite code.
  static uint8_t encode(float f, float max) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
    const uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
    float a;
    std::memcpy(&a, &abs_bits, sizeof(a));
    if (!(a < max)) return static_cast<uint8_t>(sign | kMaxCode);
    constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(kMinExp + 127) << 23;
    if (abs_bits < kMinNormalBits) {
      // Subnormal (or zero) in fp8: the code is a * 2^(kManBits - kMinExp) rounded to an
      // integer, ties to even; scaling by a power of two is exact. 2^kManBits is the smallest
      // normal's code, so a carry lands on the right code.
      const float scaled = a * static_cast<float>(1u << (kManBits - kMinExp));
      return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
    }
    constexpr int kShift = 23 - kManBits;
    uint32_t r = abs_bits + ((1u << (kShift - 1)) - 1u) + ((abs_bits >> kShift) & 1u);
    r = (r >> kShift) - (static_cast<uint32_t>(127 - kBias) << kManBits);  // rebias
    return static_cast<uint8_t>(sign | std::min(r, kMaxCode));
  }
};

using E4M3 = Fp8Format<3, 7>;
using E5M2 = Fp8Format<2, 15>;

template <typename Format>
std::array<float, 256> make_fp8_table(bool has_inf) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[static_cast<size_t>(c)] = Format::decode(static_cast<uint8_t>(c), has_inf);
  }
  return t;
}

}  // namespace

// Function-local statics: initialized on first use, whatever the static initialization order.
const float* fp8_e4m3_table() {
  static const std::array<float, 256> table = make_fp8_table<E4M3>(false);
  return table.data();
}
const float* fp8_e5m2_table() {
  static const std::array<float, 256> table = make_fp8_table<E5M2>(true);
  return table.data();
}
uint8_t f32_to_fp8_e4m3(float f) { return E4M3::encode(f, kFp8E4M3Max); }
uint8_t f32_to_fp8_e5m2(float f) { return E5M2::encode(f, kFp8E5M2Max); }

}  // namespace strata

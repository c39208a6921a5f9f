#include "core/dtype.h"

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

}  // namespace

std::string_view dtype_name(DType t) {
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

}  // namespace strata

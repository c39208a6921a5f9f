#pragma once
// The constants of the vectorized exp that the AVX-512 and AVX2 paths share
// (elementwise_avx512.cc, elementwise_avx2.cc): one definition, so the two compute the same
// sequence of fp32 operations (and, with an exact 2^n, the same bits).
//
//   x clamped to [kExpMin, kExpMax] (beyond it the fp32 result is 0 or inf anyway);
//   n = round(x * log2(e)), r = x - n * kExpLn2Hi - n * kExpLn2Lo (|r| <= ln2 / 2);
//   p = 1 + r + r^2 P5(r), P5 by Horner from kExpPoly[0] (the classic minimax coefficients);
//   exp(x) = p * 2^n.

#include <array>

namespace strata::cpu::detail {

inline constexpr float kExpMin = -104.0f;
inline constexpr float kExpMax = 89.0f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
// ln 2 in two parts: the first exact in a few bits, so n * kExpLn2Hi is exact.
inline constexpr float kExpLn2Hi = 0.693359375f;
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
inline constexpr std::array<float, 6> kExpPoly = {1.9875691500e-4f, 1.3981999507e-3f,
                                                  8.3334519073e-3f, 4.1665795894e-2f,
                                                  1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace strata::cpu::detail

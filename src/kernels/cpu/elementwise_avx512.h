#pragma once
// AVX-512 element-wise pieces of the CPU kernels: a vectorized exp and what uses it (SwiGLU's
// silu_and_mul, attention's softmax numerators). Callers pick them when best_cpu_isa() is kAvx512
// and never mix them with the scalar std::exp path within one process.
//
// exp (constants in exp_poly.h): x is clamped to [-104, 89] (beyond it the fp32 result is 0 or
// inf anyway), split as x = n ln2 + r with |r| <= ln2 / 2 (n rounded to nearest, ln2 in two
// parts), exp(r) is a degree-7 polynomial (1 + r + r^2 P5(r), the classic minimax coefficients
// for this interval) and the result is scaled by 2^n with vscalefps, which rounds denormal
// results correctly. Error about 1 ulp; each element's result depends on that element alone, so
// vector width, tails (masked lanes) and batch composition never change it.

#include <cstdint>

namespace strata::cpu::detail {

// out[i] = (gate[i] / (1 + exp(-gate[i]))) * up[i] for i < n; out may equal gate or up.
void silu_and_mul_avx512(const float* gate, const float* up, float* out, int64_t n);

// x[j] = exp(x[j] - max) for j < count; returns the sum of the new x[j] added in increasing j.
float exp_sub_and_sum_avx512(float* x, int32_t count, float max);

// The largest of x[0 .. count), count >= 1 (exact: the same value whatever the order).
float max_avx512(const float* x, int32_t count);

}  // namespace strata::cpu::detail

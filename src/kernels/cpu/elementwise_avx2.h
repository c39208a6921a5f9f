#pragma once
// AVX2 + FMA element-wise pieces of the CPU kernels: a vectorized exp and what uses it (SwiGLU's
// silu_and_mul, attention's softmax numerators). Callers pick them when best_cpu_isa() is kAvx2
// and never mix them with the scalar std::exp path within one process.
//
// exp: the AVX-512 exp's algorithm and constants (exp_poly.h, elementwise_avx512.h) on 8 lanes.
// AVX2 has no vscalefps, so 2^n is applied as two exact powers of two, 2^(n >> 1) then 2^(n - (n >>
// 1)), each a normal float: the first product is exact and the second rounds once, so denormal
// results are rounded correctly and the bits equal the AVX-512 exp's. Each element's result depends
// on that element alone.

#include <cstdint>

namespace strata::cpu::detail {

// out[i] = (gate[i] / (1 + exp(-gate[i]))) * up[i] for i < n; out may equal gate or up.
void silu_and_mul_avx2(const float* gate, const float* up, float* out, int64_t n);

// x[j] = exp(x[j] - max) for j < count; returns their sum: lane l of one 8-lane accumulator adds
// x[l], x[l + 8], ... in increasing j (from +0), then the lanes meet in reduce_lanes' tree
// (cpu_common.h). The sum depends only on count and the values, never on where x sits.
float exp_sub_and_sum_avx2(float* x, int32_t count, float max);

}  // namespace strata::cpu::detail

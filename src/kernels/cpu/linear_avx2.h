#pragma once
// The AVX2 micro-kernel of the CPU attention's q K^T (attention_avx2.h): x W^T on fp32 rows with
// the portable path's arithmetic, so that attention's AVX2 path stays bit-identical to the
// portable one. (cpu::linear's AVX2 path fuses multiply-adds: linear_fma_avx2.h.) Only call it
// when cpu_supports(CpuIsa::kAvx2).
//
// Arithmetic: each output is exactly the portable path's (cpu_common.h dot_tile): lane l of one
// 8-lane accumulator sums x[i] * w[i] for i = l, l + 8, ... with a separate multiply and add, the
// k % 8 tail goes to lanes 0.., then reduce_lanes. The tile a row lands in (4 x 2,
// 1 x 4, 1 x 1) changes only which registers hold it, so results are bit-identical to the
// portable path for every batch size and thread count.

#include <cstdint>

namespace strata::cpu::detail {

// x:   [m, k] fp32, rows ldx apart.
// w:   [n, k] fp32, rows ldw apart (attention's q K^T reads K rows in place in the paged cache).
// out: out[r * ldo + c] = dot(x row r, w row c), no bias; must not overlap the inputs.
// Bit-identical to the portable matmul_nt (cpu_common.h) on the same rows.
void matmul_nt_f32_avx2(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                        int64_t n, int64_t k, float* out, int64_t ldo);

}  // namespace strata::cpu::detail

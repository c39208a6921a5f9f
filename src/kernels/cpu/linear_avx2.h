#pragma once
// The AVX2 (+F16C) micro-kernel behind cpu::linear: x W^T with F32, BF16 or F16 weights read in
// their own dtype and widened in registers (BF16 is a 16-bit shift, F16 is vcvtph2ps), never
// copied to fp32 in memory. Only call it when cpu_supports(CpuIsa::kAvx2).
//
// Arithmetic: each output is exactly the portable path's (cpu_common.h dot_tile): lane l of one
// 8-lane accumulator sums x[i] * w[i] for i = l, l + 8, ... with a separate multiply and add, the
// k % 8 tail goes to lanes 0.., then reduce_lanes, then + bias. The tile a row lands in (4 x 2,
// 1 x 4, 1 x 1) changes only which registers hold it, so results are bit-identical to the
// portable path for every batch size and thread count.

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu::detail {

// out[r * ldo + c] = dot(x row r, w row c) (+ bias[c] when bias != nullptr) for r < m, c < n.
// x:    [m, k] fp32, rows ldx apart.
// w:    [n, k] in `dtype` (F32, BF16 or F16), rows k elements apart.
// bias: [n] fp32 or nullptr.
// out:  [m, n] fp32, rows ldo apart; must not overlap the inputs.
void matmul_nt_avx2(const float* x, int64_t ldx, int64_t m, const void* w, DType dtype, int64_t n,
                    int64_t k, const float* bias, float* out, int64_t ldo);

// The same arithmetic on fp32 rows of w that are ldw apart (attention's q K^T reads K rows in
// place in the paged cache): out[r * ldo + c] = dot(x row r, w row c), no bias. Bit-identical
// to the portable matmul_nt (cpu_common.h) on the same rows.
void matmul_nt_f32_avx2(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                        int64_t n, int64_t k, float* out, int64_t ldo);

}  // namespace strata::cpu::detail

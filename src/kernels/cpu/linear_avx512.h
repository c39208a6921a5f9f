#pragma once
// The AVX-512 micro-kernel behind cpu::linear: x W^T with F32, BF16 or F16 weights read in their
// own dtype and widened in registers (BF16: a zero-extend and 16-bit shift; F16: vcvtph2ps), never
// copied to fp32 in memory. Only call it when cpu_supports(CpuIsa::kAvx512).
//
// Arithmetic (differs from the portable/AVX2 paths, which never fuse): each output has ONE
// 16-lane accumulator; lane l sums x[i] * w[i] for i = l, l + 16, ... with fused multiply-adds in
// increasing i, the k % 16 tail is a masked FMA (masked lanes keep their value), then the 16
// lanes are summed in one fixed tree (reduce4 in the .cc: (l, l + 8), then (l, l + 4), then
// (l, l + 2), then (l, l + 1)), then + bias. A register tile (up to 4 rows x 6 columns) only
// decides which registers hold which outputs: results are bit-identical whatever m, the row's
// position in the batch, the tile or the thread count.

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu::detail {

// Columns of W one register tile covers (linear.cc splits work in groups of this many columns).
inline constexpr int64_t kAvx512TileCols = 6;

// out[r * ldo + c] = dot(x row r, w row c) (+ bias[c] when bias != nullptr) for r < m, c < n.
// x:    [m, k] fp32, rows ldx apart.
// w:    [n, k] in `dtype` (F32, BF16 or F16), rows k elements apart.
// bias: [n] fp32 or nullptr.
// out:  [m, n] fp32, rows ldo apart; must not overlap the inputs.
void matmul_nt_avx512(const float* x, int64_t ldx, int64_t m, const void* w, DType dtype,
                      int64_t n, int64_t k, const float* bias, float* out, int64_t ldo);

// The same arithmetic on fp32 rows of w that are ldw apart (attention's q K^T reads K rows in
// place in the paged cache): out[r * ldo + c] = dot(x row r, w row c), no bias.
void matmul_nt_f32_avx512(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                          int64_t n, int64_t k, float* out, int64_t ldo);

}  // namespace strata::cpu::detail

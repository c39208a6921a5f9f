#pragma once
// The AVX2 + FMA micro-kernels behind cpu::linear's AVX2 path: x W^T with F32, BF16 or F16
// weights. Only call them when cpu_supports(CpuIsa::kAvx2).
//
// Arithmetic (fused, so it rounds differently from the portable path): each output has ONE 8-lane
// accumulator; lane l sums x[i] * w[i] for i = l, l + 8, ... with fused multiply-adds in
// increasing i; when k % 8 != 0 a last step multiplies x and w with their elements past k set to
// zero (lanes >= k % 8 add +0); then the lanes are summed in reduce_lanes' tree (cpu_common.h),
// then + bias. Two ways compute it, with the same bits:
//   - rows of x < kFmaAvx2MinSlabRows (a decode step): weights widened in registers as they are
//     read, up to 3 x 4 register tiles, accumulators in registers over the whole k;
//   - more rows (a prefill, many streams): kFmaAvx2GroupCols weight rows at a time widened to an
//     fp32 slab of kFmaAvx2KBlock columns, which every row of x then reads from L1 in 3 x 4
//     register tiles, the accumulators stored in memory between k-blocks (exactly, so the chain
//     of each lane is unchanged).
// So results are bit-identical whatever m, the row's position in the batch, the tile or the
// thread count.

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu::detail {

// Rows of W one group covers (linear.cc splits work in groups of this many rows).
inline constexpr int64_t kFmaAvx2GroupCols = 16;
// Columns of k per slab: 16 rows of 256 fp32 are 16 KB, half of a 32 KB L1.
inline constexpr int64_t kFmaAvx2KBlock = 256;
// From this many rows of x on, weights are widened to a slab first (the widening is then shared
// by at least this many rows).
inline constexpr int64_t kFmaAvx2MinSlabRows = 6;

// out[r * ldo + c] = dot(x row r, w row c) (+ bias[c] when bias != nullptr) for r < m, c < n.
// x:    [m, k] fp32, rows ldx apart.
// w:    [n, k] in `dtype` (F32, BF16 or F16), rows k elements apart.
// bias: [n] fp32 or nullptr.
// out:  [m, n] fp32, rows ldo apart; must not overlap the inputs.
void matmul_nt_fma_avx2(const float* x, int64_t ldx, int64_t m, const void* w, DType dtype,
                        int64_t n, int64_t k, const float* bias, float* out, int64_t ldo);

}  // namespace strata::cpu::detail

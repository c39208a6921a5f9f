#pragma once
// The AVX2 + FMA pieces of paged attention (attention.cc picks them when best_cpu_isa() is
// kAvx2; the softmax numerators come from exp_sub_and_sum_avx2, elementwise_avx2.h). Only call
// them when cpu_supports(kAvx2).
//
// Arithmetic (fused, so it rounds differently from the portable path), one fixed sequence per
// element whatever the tile, the rows sharing a call or the key's place in its block:
//   - a score is scale * (((c_0 + c_1) + c_2) + ...), where c_b is one chain of fused
//     multiply-adds of q[i] * k[i] over the head-dim elements [16 b, 16 b + 16) in increasing i
//     starting from 0 (error grows with 16 + head_dim / 16 terms, as the portable path's 8 lanes
//     and tree do, not with head_dim). The block's keys are transposed first
//     (transpose_keys_avx2), so that 8 keys' scores share each multiply-add and no lanes are
//     summed across;
//   - acc[h][c] += part, where part = sum over j of w[h][j] * v[j][c] is one chain of fused
//     multiply-adds in increasing j starting from 0 (heads in register tiles of 1..4, channels in
//     8-lane vectors, the head_dim % 8 tail one channel at a time with std::fma).

#include <cstdint>

namespace strata::cpu::detail {

// For h < num_heads and c < d: acc[h][c] += sum_{j < count} w[h][j] * v[j * ldv + c].
// w:   num_heads pointers to [count] softmax weights.
// v:   [count, ldv] fp32 V rows (ldv >= d), read in place.
// acc: num_heads pointers to [d] fp32 accumulators.
void accumulate_pv_avx2(const float* const* w, int32_t num_heads, const float* v, int64_t ldv,
                        int32_t count, int32_t d, float* const* acc);

// Keys per transposed row: count rounded up to a multiple of 8.
inline int32_t transposed_keys_stride(int32_t count) { return (count + 7) / 8 * 8; }

// kt[i * ldt + j] = k[j * ldk + i] for j < count and i < d, and 0 for count <= j < ldt, where
// ldt = transposed_keys_stride(count). k: [count, ldk] fp32 K rows (ldk >= d), read in place; kt:
// [d, ldt].
void transpose_keys_avx2(const float* k, int64_t ldk, int32_t count, int32_t d, float* kt);

// scores[r * lds + j] = scale * sum_{i < d} q[r * ldq + i] * kt[i * ldt + j] for r < rows and
// j < count (nothing past count is written), kt from transpose_keys_avx2(.., count, d, kt).
void scores_avx2(const float* q, int64_t ldq, int64_t rows, const float* kt, int32_t count,
                 int32_t d, float scale, float* scores, int64_t lds);

// The largest of x[0 .. count), count >= 1: std::max_element's value (max is exact, so the order
// does not matter; x holds no NaN).
float max_avx2(const float* x, int32_t count);

}  // namespace strata::cpu::detail

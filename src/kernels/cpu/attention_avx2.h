#pragma once
// The AVX2 pieces of paged attention (attention.cc picks it when best_cpu_isa() is kAvx2; the
// scores use matmul_nt_f32_avx2 from linear_avx2.h). Only call it when cpu_supports(kAvx2).
//
// Arithmetic: exactly the portable path's (attention.cc accumulate_weighted_v): acc[h][c] += part,
// where part = sum over j of w[h][j] * v[j][c], a separate multiply and add per j in increasing j
// starting from 0. Heads are processed in register tiles of 1..4 and channels in 8-lane vectors
// (the head_dim % 8 tail one channel at a time), none of which changes an element's sequence of
// operations: results are bit-identical to the portable path whatever the group or tile size.

#include <cstdint>

namespace strata::cpu::detail {

// For h < num_heads and c < d: acc[h][c] += sum_{j < count} w[h][j] * v[j * ldv + c].
// w:   num_heads pointers to [count] softmax weights.
// v:   [count, ldv] fp32 V rows (ldv >= d), read in place.
// acc: num_heads pointers to [d] fp32 accumulators.
void accumulate_pv_avx2(const float* const* w, int32_t num_heads, const float* v, int64_t ldv,
                        int32_t count, int32_t d, float* const* acc);

// The largest of x[0 .. count), count >= 1: std::max_element's value (max is exact, so the order
// does not matter; x holds no NaN).
float max_avx2(const float* x, int32_t count);

}  // namespace strata::cpu::detail

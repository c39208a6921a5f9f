#pragma once
// AVX-512 pieces of paged attention (attention.cc picks them when best_cpu_isa() is kAvx512; the
// scores use matmul_nt_f32_avx512 from linear_avx512.h). Only call when cpu_supports(kAvx512).
//
// Arithmetic: acc[h][c] += part, where part = sum over j of w[h][j] * v[j][c] is one chain of fused
// multiply-adds in increasing j starting from 0. Heads are processed in register tiles of 1..4
// and channels in 16-lane vectors (the head_dim % 16 tail masked), but neither changes an
// element's sequence of operations, so results do not depend on the group size or tiling.

#include <cstdint>

namespace strata::cpu::detail {

// For h < num_heads and c < d: acc[h][c] += sum_{j < count} w[h][j] * v[j * ldv + c].
// w:   num_heads pointers to [count] softmax weights.
// v:   [count, ldv] fp32 V rows (ldv >= d), read in place.
// acc: num_heads pointers to [d] fp32 accumulators.
void accumulate_pv_avx512(const float* const* w, int32_t num_heads, const float* v, int64_t ldv,
                          int32_t count, int32_t d, float* const* acc);

}  // namespace strata::cpu::detail

#pragma once
// CPU reference of paged decode attention in double precision, reading the same host copy of the
// pool (through PagedKvLayout / PagedKvCacheView with host pointers) that the GPU kernel reads.

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/paged_kv.h"

namespace strata::cuda::testing {

struct DecodeReference {
  std::vector<double> o;     // [num_seqs, num_qo_heads, head_dim]
  std::vector<double> lse;   // [num_seqs, num_qo_heads], natural log; -inf for kv_len 0
  std::vector<double> mass;  // [num_pool_slots, num_kv_heads], added attention probabilities
};

// q: [num_seqs, num_qo_heads, head_dim] 16-bit floats of q_dtype, q_seq_stride apart. K and V
// are read through kv_element (kv_test_pool.h): any cache dtype the kernels read.
DecodeReference decode_reference(const std::vector<uint16_t>& q, DType q_dtype,
                                 int64_t q_seq_stride, const PagedKvLayout& layout,
                                 const PagedKvCacheView& cache, int32_t num_qo_heads,
                                 double sm_scale, int32_t window_left, int64_t num_pool_slots);

}  // namespace strata::cuda::testing

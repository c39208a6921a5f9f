#pragma once
// Random KV pools for the attention tests, in every cache dtype the kernels read: 16-bit floats
// uniform in [-1, 1); FP8 codes of uniform [-1, 1) values under per-layer static scales; INT8
// codes uniform in [-127, 127] with a random fp16 scale per (token, head). The reference reads
// them back through kv_element, which decodes as docs/kv-quant.md says (independently of the
// kernels and of the encoders).

#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "kv/kv_layout.h"

namespace strata::cuda::testing {

// The q/o dtype of attention over a cache of kv_dtype (bf16 over a quantized cache).
DType attention_qo_dtype(DType kv_dtype);

// A layout of num_layers layers; FP8 caches get static scales that make |K|, |V| up to ~1.3.
kv::KvLayout test_kv_layout(DType dtype, int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                            int32_t block_size);

// The whole pool of num_blocks blocks, filled as above (stored in 16-bit words; pool_bytes is
// even for every layout).
std::vector<uint16_t> random_kv_pool(const kv::KvLayout& layout, int32_t num_blocks,
                                     std::mt19937_64& rng);

// The real value of channel e of K (v = false) or V at (block, head, token) of a host view.
double kv_element(const PagedKvCacheView& cache, bool v, int32_t block, int32_t kv_head,
                  int32_t token, int32_t e);

// One (token, head) row of Q (head dim d, 16-bit floats of qo_dtype) as attention over a cache
// of kv_dtype multiplies it: over an FP8 cache rounded to e4m3 with its largest |q| within 448,
// over INT8 to int8 within 127 (kernels/cuda/query_codes.cuh), otherwise the values as they are.
std::vector<double> attention_query_row(const uint16_t* q, int32_t d, DType qo_dtype,
                                        DType kv_dtype);

}  // namespace strata::cuda::testing

#include "decode_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "kv_test_pool.h"

namespace strata::cuda::testing {

DecodeReference decode_reference(const std::vector<uint16_t>& q, DType q_dtype,
                                 int64_t q_seq_stride, const PagedKvLayout& layout,
                                 const PagedKvCacheView& cache, int32_t num_qo_heads,
                                 double sm_scale, int32_t window_left, int64_t num_pool_slots) {
  const int32_t d = cache.head_dim;
  const int32_t group = num_qo_heads / cache.num_kv_heads;
  DecodeReference r;
  r.o.assign(static_cast<size_t>(layout.num_seqs) * num_qo_heads * d, 0.0);
  r.lse.assign(static_cast<size_t>(layout.num_seqs) * num_qo_heads,
               -std::numeric_limits<double>::infinity());
  r.mass.assign(static_cast<size_t>(num_pool_slots) * cache.num_kv_heads, 0.0);
  std::vector<double> qd(d);
  std::vector<double> scores;
  for (int32_t s = 0; s < layout.num_seqs; ++s) {
    const int32_t len = layout.kv_len(s);
    const int32_t begin = window_left >= 0 ? std::max(0, len - 1 - window_left) : 0;
    if (len == 0) continue;
    for (int32_t h = 0; h < num_qo_heads; ++h) {
      const int32_t kvh = h / group;
      qd = attention_query_row(&q[s * q_seq_stride + static_cast<int64_t>(h) * d], d, q_dtype,
                               cache.dtype);
      scores.assign(static_cast<size_t>(len - begin), 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (int32_t t = begin; t < len; ++t) {
        const int32_t block = layout.block_of(s, t);
        double dot = 0.0;
        for (int32_t e = 0; e < d; ++e) {
          dot += qd[e] * kv_element(cache, false, block, kvh, t % layout.block_size, e);
        }
        scores[t - begin] = dot * sm_scale;
        m = std::max(m, scores[t - begin]);
      }
      double l = 0.0;
      for (double& x : scores) {
        x = std::exp(x - m);
        l += x;
      }
      double* o = &r.o[(static_cast<size_t>(s) * num_qo_heads + h) * d];
      for (int32_t t = begin; t < len; ++t) {
        const int32_t block = layout.block_of(s, t);
        const double p = scores[t - begin] / l;
        for (int32_t e = 0; e < d; ++e) {
          o[e] += p * kv_element(cache, true, block, kvh, t % layout.block_size, e);
        }
        const int64_t slot =
            static_cast<int64_t>(block) * layout.block_size + t % layout.block_size;
        r.mass[slot * cache.num_kv_heads + kvh] += p;
      }
      r.lse[static_cast<size_t>(s) * num_qo_heads + h] = m + std::log(l);
    }
  }
  return r;
}

}  // namespace strata::cuda::testing

#include "model/mla_gpu.h"

#include "core/check.h"

namespace strata::model {

std::string gpu_mla_refusal(const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  if (!m.enabled()) return {};
  const std::string what = "--device cuda: " + std::string(architecture_name(c.architecture)) +
                           " (Multi-head Latent Attention): the GPU MLA kernels take ";
  if (m.kv_lora_rank != kGpuMlaKvLoraRank || m.qk_rope_head_dim != kGpuMlaRopeDim) {
    return what + "kv_lora_rank 512 and qk_rope_head_dim 64 (a latent row of 576), not " +
           std::to_string(m.kv_lora_rank) + " and " + std::to_string(m.qk_rope_head_dim);
  }
  const int64_t heads = c.num_attention_heads;
  if (heads % kGpuMlaHeadQuantum != 0 || heads > kGpuMlaMaxHeads) {
    return what + "num_attention_heads a multiple of 16 up to 128, not " + std::to_string(heads);
  }
  if (m.qk_nope_head_dim % 8 != 0 || m.v_head_dim % 8 != 0) {
    return what + "qk_nope_head_dim and v_head_dim multiples of 8, not " +
           std::to_string(m.qk_nope_head_dim) + " and " + std::to_string(m.v_head_dim);
  }
  return {};
}

void build_mla_row_layout(const PagedKvLayout& layout, std::span<const int32_t> q_indptr,
                          MlaRowLayout& out) {
  STRATA_CHECK(q_indptr.size() == static_cast<size_t>(layout.num_seqs) + 1,
               "build_mla_row_layout: one q_indptr entry per sequence and one more");
  STRATA_CHECK(layout.first_block == nullptr,
               "build_mla_row_layout: sequences hold their blocks from logical block 0");
  const int32_t bs = layout.block_size;
  out.kv_indptr.assign(1, 0);
  out.kv_indices.clear();
  out.kv_last_page_len.clear();
  for (int32_t s = 0; s < layout.num_seqs; ++s) {
    const int32_t q_len = q_indptr[static_cast<size_t>(s) + 1] - q_indptr[static_cast<size_t>(s)];
    const int32_t kv_len = layout.kv_len(s);
    STRATA_CHECK(q_len <= kv_len, "build_mla_row_layout: more rows than the sequence's tokens");
    for (int32_t j = 0; j < q_len; ++j) {
      const int32_t len = kv_len - (q_len - 1 - j);
      const int32_t blocks = (len + bs - 1) / bs;
      for (int32_t b = 0; b < blocks; ++b) out.kv_indices.push_back(layout.block_at(s, b));
      out.kv_indptr.push_back(static_cast<int32_t>(out.kv_indices.size()));
      out.kv_last_page_len.push_back(len - (blocks - 1) * bs);
    }
  }
}

std::vector<uint16_t> mla_uk_transposed(std::span<const uint16_t> kv_b, int64_t heads, int64_t nope,
                                        int64_t v_dim, int64_t rank) {
  const int64_t per_head = nope + v_dim;
  STRATA_CHECK(static_cast<int64_t>(kv_b.size()) == heads * per_head * rank,
               "mla_uk_transposed: kv_b_proj is [heads * (nope + v_dim), rank]");
  std::vector<uint16_t> out(static_cast<size_t>(heads * rank * nope));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t d = 0; d < nope; ++d) {
      const uint16_t* row = kv_b.data() + (h * per_head + d) * rank;
      for (int64_t c = 0; c < rank; ++c) {
        out[static_cast<size_t>((h * rank + c) * nope + d)] = row[c];
      }
    }
  }
  return out;
}

}  // namespace strata::model

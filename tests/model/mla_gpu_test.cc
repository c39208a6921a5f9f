// The GPU runner's host-side MLA rules (model/mla_gpu.h): which DeepSeek shapes it takes, the
// per-row paged layout that runs prompt rows through the MLA decode kernel, and W_UK's
// arrangement for the absorbed query. CPU only.

#include "model/mla_gpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/hf_config.h"

namespace strata::model {
namespace {

// DeepSeek-V2-Lite's attention shape (16 heads, latent 512 + 64), with the given overrides.
ModelConfig lite(int64_t heads = 16, int64_t rank = 512, int64_t rope = 64, int64_t nope = 128,
                 int64_t v = 128) {
  const std::string text = R"({
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
    "vocab_size": 256, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
    "head_dim": 64,
    "num_attention_heads": )" +
                           std::to_string(heads) + R"(, "num_key_value_heads": )" +
                           std::to_string(heads) + R"(, "kv_lora_rank": )" + std::to_string(rank) +
                           R"(, "qk_rope_head_dim": )" + std::to_string(rope) +
                           R"(, "qk_nope_head_dim": )" + std::to_string(nope) +
                           R"(, "v_head_dim": )" + std::to_string(v) + R"(,
    "q_lora_rank": null, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 64, "n_shared_experts": 1, "first_k_dense_replace": 1,
    "max_position_embeddings": 1024, "tie_word_embeddings": false})";
  return parse_model_config_text(text, "deepseek-v2-lite-like");
}

TEST(MlaGpuTest, TakesTheKernelsShapesAndNamesWhatItRefuses) {
  EXPECT_EQ(gpu_mla_refusal(lite()), "");
  EXPECT_EQ(gpu_mla_refusal(lite(128)), "");
  const std::string rank = gpu_mla_refusal(lite(16, 256));
  EXPECT_NE(rank.find("--device cuda: DeepseekV2ForCausalLM"), std::string::npos) << rank;
  EXPECT_NE(rank.find("not 256 and 64"), std::string::npos) << rank;
  EXPECT_NE(gpu_mla_refusal(lite(16, 512, 32)).find("not 512 and 32"), std::string::npos);
  EXPECT_NE(gpu_mla_refusal(lite(24)).find("multiple of 16 up to 128, not 24"), std::string::npos);
  EXPECT_NE(gpu_mla_refusal(lite(144)).find("not 144"), std::string::npos);
  EXPECT_NE(gpu_mla_refusal(lite(16, 512, 64, 36)).find("not 36 and 128"), std::string::npos);
  ModelConfig llama = lite();
  llama.mla = MlaConfig{};
  EXPECT_EQ(gpu_mla_refusal(llama), "") << "no MLA: nothing to refuse";
}

// Two sequences over block size 4: a decode row of a 6-token sequence (blocks 7, 3), then a
// 3-row chunk of a sequence whose first 2 tokens were cached (5 tokens over blocks 9, 2). Each row
// attends to its own prefix: lengths 6 | 3, 4, 5.
TEST(MlaGpuTest, EveryRowBecomesASequenceOverItsOwnPrefix) {
  const std::vector<int32_t> indptr = {0, 2, 4};
  const std::vector<int32_t> indices = {7, 3, 9, 2};
  const std::vector<int32_t> last = {2, 1};
  PagedKvLayout layout;
  layout.kv_indptr = indptr.data();
  layout.kv_indices = indices.data();
  layout.kv_last_page_len = last.data();
  layout.num_seqs = 2;
  layout.block_size = 4;
  const std::vector<int32_t> q_indptr = {0, 1, 4};
  MlaRowLayout rows;
  build_mla_row_layout(layout, q_indptr, rows);
  EXPECT_EQ(rows.kv_indptr, (std::vector<int32_t>{0, 2, 3, 4, 6}));
  EXPECT_EQ(rows.kv_indices, (std::vector<int32_t>{7, 3, 9, 9, 9, 2}));
  EXPECT_EQ(rows.kv_last_page_len, (std::vector<int32_t>{2, 3, 4, 1}));
  // As a layout, row r's kv_len is its position + 1.
  PagedKvLayout per_row;
  per_row.kv_indptr = rows.kv_indptr.data();
  per_row.kv_indices = rows.kv_indices.data();
  per_row.kv_last_page_len = rows.kv_last_page_len.data();
  per_row.num_seqs = 4;
  per_row.block_size = 4;
  EXPECT_EQ(per_row.kv_len(0), 6);
  EXPECT_EQ(per_row.kv_len(1), 3);
  EXPECT_EQ(per_row.kv_len(2), 4);
  EXPECT_EQ(per_row.kv_len(3), 5);
  // Building again into the same object replaces the old rows.
  build_mla_row_layout(layout, q_indptr, rows);
  EXPECT_EQ(rows.kv_indices.size(), 6u);
}

// A whole prompt of 9 tokens over block size 4: rows 0..8 read 1, 1, 1, 1, 2, 2, 2, 2, 3 blocks.
TEST(MlaGpuTest, AWholePromptReadsOneMoreBlockEveryBlockSizeRows) {
  const std::vector<int32_t> indptr = {0, 3};
  const std::vector<int32_t> indices = {5, 6, 8};
  const std::vector<int32_t> last = {1};
  PagedKvLayout layout;
  layout.kv_indptr = indptr.data();
  layout.kv_indices = indices.data();
  layout.kv_last_page_len = last.data();
  layout.num_seqs = 1;
  layout.block_size = 4;
  const std::vector<int32_t> q_indptr = {0, 9};
  MlaRowLayout rows;
  build_mla_row_layout(layout, q_indptr, rows);
  EXPECT_EQ(rows.kv_indptr, (std::vector<int32_t>{0, 1, 2, 3, 4, 6, 8, 10, 12, 15}));
  EXPECT_EQ(rows.kv_last_page_len, (std::vector<int32_t>{1, 2, 3, 4, 1, 2, 3, 4, 1}));
  EXPECT_EQ(rows.kv_indices, (std::vector<int32_t>{5, 5, 5, 5, 5, 6, 5, 6, 5, 6, 5, 6, 5, 6, 8}));
}

// W_UK_h^T: out[h][c][d] = kv_b[h * (nope + v) + d][c], the V rows of each head skipped.
TEST(MlaGpuTest, UkTransposedTakesEachHeadsNopeRowsAsColumns) {
  const int64_t heads = 2, nope = 2, v = 1, rank = 3;
  std::vector<uint16_t> kv_b(static_cast<size_t>(heads * (nope + v) * rank));
  for (size_t i = 0; i < kv_b.size(); ++i) kv_b[i] = static_cast<uint16_t>(100 + i);
  // kv_b rows: head 0: 100 101 102 | 103 104 105 | (v) 106 107 108
  //            head 1: 109 110 111 | 112 113 114 | (v) 115 116 117
  const std::vector<uint16_t> out = mla_uk_transposed(kv_b, heads, nope, v, rank);
  EXPECT_EQ(out, (std::vector<uint16_t>{100, 103, 101, 104, 102, 105,  //
                                        109, 112, 110, 113, 111, 114}));
}

// What the runner does with it: head h's absorbed query is the product a w^T of q_nope_h [nope]
// and uk_t[h] as a row-major [rank, nope] matrix (Gemm's convention), and its dot product with a
// latent c_kv [rank] equals q_nope_h . (W_UK_h c_kv), transformers' expanded q . k_nope.
TEST(MlaGpuTest, TheAbsorbedQueryScoresAsTheExpandedKey) {
  const int64_t heads = 3, nope = 4, v = 2, rank = 5;
  std::vector<uint16_t> kv_b(static_cast<size_t>(heads * (nope + v) * rank));
  for (size_t i = 0; i < kv_b.size(); ++i) {
    kv_b[i] = f32_to_bf16(static_cast<float>((i * 7) % 11) / 8.0f - 0.6f);
  }
  const std::vector<uint16_t> uk_t = mla_uk_transposed(kv_b, heads, nope, v, rank);
  const std::vector<float> q_nope = {0.5f, -1.0f, 0.25f, 2.0f};
  const std::vector<float> c_kv = {1.0f, -0.5f, 0.75f, 0.125f, -2.0f};
  for (int64_t h = 0; h < heads; ++h) {
    double expanded = 0.0;  // q_nope . k_nope, k_nope[d] = sum_c kv_b[h (nope + v) + d][c] c[c]
    for (int64_t d = 0; d < nope; ++d) {
      double k = 0.0;
      for (int64_t c = 0; c < rank; ++c) {
        k += double{bf16_to_f32(kv_b[static_cast<size_t>((h * (nope + v) + d) * rank + c)])} *
             c_kv[static_cast<size_t>(c)];
      }
      expanded += q_nope[static_cast<size_t>(d)] * k;
    }
    double absorbed = 0.0;  // (q_nope uk_t[h]^T) . c_kv
    for (int64_t c = 0; c < rank; ++c) {
      double q = 0.0;
      for (int64_t d = 0; d < nope; ++d) {
        q += double{bf16_to_f32(uk_t[static_cast<size_t>((h * rank + c) * nope + d)])} *
             q_nope[static_cast<size_t>(d)];
      }
      absorbed += q * c_kv[static_cast<size_t>(c)];
    }
    EXPECT_NEAR(absorbed, expanded, 1e-9) << "head " << h;
    EXPECT_GT(std::abs(expanded), 0.01) << "a case that can tell";
  }
}

}  // namespace
}  // namespace strata::model

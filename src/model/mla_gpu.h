#pragma once
// Host-side rules of DeepSeek's MLA on the GPU runner (docs/gpu-engine.md, "DeepSeek"), kept
// free of CUDA so the planner, the runner factory and CPU tests share them:
//   - which configs the GPU kernels take (mla_decode's latent of 576 and query heads in
//     multiples of 16 up to 128; the absorbed products' 16-byte-aligned head slices);
//   - the per-token paged layout that runs a step's prompt rows through the decode kernel;
//   - W_UK's arrangement for the query absorption.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/paged_kv.h"
#include "model/hf_config.h"

namespace strata::model {

// The kernels' limits (kernels/cuda/mla_decode.h, mla_ops.h; the CUDA build checks they agree).
inline constexpr int64_t kGpuMlaKvLoraRank = 512;
inline constexpr int64_t kGpuMlaRopeDim = 64;
inline constexpr int64_t kGpuMlaHeadQuantum = 16;
inline constexpr int64_t kGpuMlaMaxHeads = 128;

// Empty when --device cuda runs this MLA config (or the config has no MLA), else why not, naming
// the config keys and the values the kernels take.
std::string gpu_mla_refusal(const ModelConfig& c);

// A step's rows as sequences of their own over their sequence's blocks: row t of sequence s, the
// j-th of its q_len rows, attends to the first kv_len(s) - (q_len - 1 - j) tokens, so row t gets
// entry t with the blocks holding them (the sequence's block ids repeated per row) and its last
// page length. The decode kernel then computes causal prefill attention, one query per
// "sequence". Sizes: kv_indptr [num_rows + 1], kv_last_page_len [num_rows], kv_indices
// [kv_indptr[num_rows]] <= num_rows x the longest sequence's blocks.
struct MlaRowLayout {
  std::vector<int32_t> kv_indptr, kv_indices, kv_last_page_len;
};
// `layout` (host pointers) with q_indptr [layout.num_seqs + 1] the rows of each sequence; every
// sequence holds all its tokens from logical block 0 (no newest-blocks group).
void build_mla_row_layout(const PagedKvLayout& layout, std::span<const int32_t> q_indptr,
                          MlaRowLayout& out);

// W_UK_h^T per head, from kv_b_proj [heads * (nope + v_dim), rank] (row-major, 16-bit values):
// out [heads, rank, nope], out[h][c][d] = kv_b[h * (nope + v_dim) + d][c], so head h's absorbed
// query W_UK_h^T q_nope is a product against a [rank, nope] row-major matrix.
std::vector<uint16_t> mla_uk_transposed(std::span<const uint16_t> kv_b, int64_t heads, int64_t nope,
                                        int64_t v_dim, int64_t rank);

}  // namespace strata::model

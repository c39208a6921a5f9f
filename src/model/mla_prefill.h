#pragma once
// Internal to src/model: which form DeepSeek's Multi-head Latent Attention takes for one
// sequence's rows of a step on the CPU (model_mla.cc, model_mla_prefill.cc).
//
// Absorbed: the query is absorbed through W_UK into the latent and attends to the cached latent
// rows as MQA (one KV head of kv_lora_rank + rope channels). Expanded: the sequence's cached
// latent rows are up-projected through kv_b_proj into per-head K_nope and V, the shared rope
// part appended to K, and its rows run ordinary multi-head attention. Both read the one latent
// cache and agree to rounding (well inside the CPU invariance tolerance of 1e-5 on the
// fixtures' logits), not bit for bit.
//
// The rule looks at the sequence alone -- its rows in the step and the context they attend --
// never at its batch mates, so a request gets the same form alone as batched; chunking it
// differently may change the form of a chunk, within the CPU invariance tolerance.

#include <cstdint>
#include <vector>

#include "core/paged_kv.h"
#include "model/hf_config.h"

namespace strata::model {

// What Model::set_mla_prefill forces (tests, benchmarks); kAuto is choose_mla_form's rule.
enum class MlaPrefill : uint8_t { kAuto, kAbsorbed, kExpanded };

enum class MlaForm : uint8_t { kAbsorbed, kExpanded };

// The form of one sequence's q_len rows (its new tokens in the step) over its kv_len cached
// tokens (these rows included; kv_len >= q_len). A single row (decode, or a one-token chunk) is
// always absorbed; kAbsorbed / kExpanded force the form of longer runs; kAuto takes the cheaper
// by mla_form_cost.
MlaForm choose_mla_form(const MlaConfig& m, int64_t num_heads, int64_t q_len, int64_t kv_len,
                        MlaPrefill mode);

// The estimated time of one layer's attention for those rows in a form, in units of one GEMM
// flop of cpu::linear: the form's projection flops (absorbing and un-absorbing the rows, or
// up-projecting the whole context) at 1, its attention flops (q.k and p.v over the latent width
// absorbed, over qk_nope + qk_rope and v_head_dim expanded) at weights measured by
// strata_mla_prefill_bench (docs/benchmarks.md, "DeepSeek"). What both forms share (the q and
// kv_a projections, o_proj) is left out.
double mla_form_cost(const MlaConfig& m, int64_t num_heads, int64_t q_len, int64_t kv_len,
                     MlaForm form);

// Some of a step's sequences as a batch of their own (Model::run_mla_split): their token rows,
// q_indptr and paged layout (over the latent cache's blocks, or over scratch blocks), and each
// row's attention-mass offset when the mass is wanted.
struct MlaSubBatch {
  std::vector<int32_t> seqs;  // the step's sequence indices, in order
  std::vector<int32_t> rows;  // the step's token row of each row
  std::vector<int32_t> q_indptr, kv_indptr, kv_indices, last_page_len;
  std::vector<int64_t> mass_offsets;  // [rows.size()] or empty

  PagedKvLayout layout(int32_t block_size) const {
    PagedKvLayout l;
    l.kv_indptr = kv_indptr.data();
    l.kv_indices = kv_indices.data();
    l.kv_last_page_len = last_page_len.data();
    l.num_seqs = static_cast<int32_t>(seqs.size());
    l.block_size = block_size;
    return l;
  }
};

}  // namespace strata::model

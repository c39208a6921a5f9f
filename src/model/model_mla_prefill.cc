// Model's Multi-head Latent Attention in the expanded form for prefill rows, and the split of a
// step between the absorbed and the expanded form (mla_prefill.h; docs/architecture.md,
// "DeepSeek").
//
// A sequence whose rows take the expanded form reads its whole context from the latent cache
// through its block table (after this step's rows were appended), up-projects the c_kv part of
// every row through kv_b_proj into per-head K_nope and V, puts the shared rope part beside K_nope,
// and runs causal multi-head attention in tiles of query rows of one head that share each K/V
// read. The latent cache stays the one source of K/V: prefix hits, chunking and preemption see
// nothing new, and a row's expanded output depends only on its position and the cached latent,
// as the absorbed one's does.
//
// Why not the paged kernel over a scratch K/V view: with one query head per KV head its (token,
// head) tasks are matrix-vector products, and the expanded form measured 2.2x slower than the
// absorbed one at a 1024-token chunk over 1024 cached tokens on DeepSeek-V2-Lite's shape; tiles
// of 16 rows make it 0.56x.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise_avx512.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_avx512.h"
#include "model/index_cast.h"
#include "model/mla_prefill.h"
#include "model/model.h"

namespace strata::model {
namespace {

// mla_form_cost's weights, in GEMM flops of cpu::linear: an attention flop of the absorbed form
// (the paged kernel, 16 query heads sharing each latent row) and of the expanded form (tiles of
// 16 rows of one head sharing each K/V row). Fitted to strata_mla_prefill_bench on
// DeepSeek-V2-Lite's shape on the 2-core CPU (docs/benchmarks.md, "DeepSeek"), where the
// expanded form's copies of the up-projected K/V weighed nothing measurable.
constexpr double kAbsorbedAttentionFlopCost = 1.75;
constexpr double kExpandedAttentionFlopCost = 2.0;

// (query, key) pairs of q_len causal rows whose last is at position kv_len - 1.
double attended_pairs(int64_t q_len, int64_t kv_len) {
  const auto q = static_cast<double>(q_len);
  return q * static_cast<double>(kv_len - q_len) + q * (q + 1.0) / 2.0;
}

// The step's sequences of `form` as a batch of their own: their rows and, over the latent
// cache's block ids or (scratch_blocks) over scratch blocks 0, 1, ... in order, their layout.
// mass_offsets: the step's per-row mass offsets to carry over, or null.
void build_sub_batch(const ForwardBatch& b, const std::vector<MlaForm>& forms, MlaForm form,
                     bool scratch_blocks, const std::vector<int64_t>* mass_offsets,
                     MlaSubBatch& sub) {
  sub.seqs.clear();
  sub.rows.clear();
  sub.kv_indices.clear();
  sub.last_page_len.clear();
  sub.mass_offsets.clear();
  sub.q_indptr.assign(1, 0);
  sub.kv_indptr.assign(1, 0);
  const PagedKvLayout& layout = b.layout;
  for (int32_t s = 0; s < layout.num_seqs; ++s) {
    if (forms[at(s)] != form) continue;
    sub.seqs.push_back(s);
    for (int32_t t = b.q_indptr[s]; t < b.q_indptr[s + 1]; ++t) {
      sub.rows.push_back(t);
      if (mass_offsets != nullptr) sub.mass_offsets.push_back((*mass_offsets)[at(t)]);
    }
    sub.q_indptr.push_back(static_cast<int32_t>(sub.rows.size()));
    for (int32_t i = layout.kv_indptr[s]; i < layout.kv_indptr[s + 1]; ++i) {
      sub.kv_indices.push_back(scratch_blocks ? static_cast<int32_t>(sub.kv_indices.size())
                                              : layout.kv_indices[i]);
    }
    sub.kv_indptr.push_back(static_cast<int32_t>(sub.kv_indices.size()));
    sub.last_page_len.push_back(layout.num_blocks(s) > 0 ? layout.kv_last_page_len[s] : 0);
  }
}

}  // namespace

double mla_form_cost(const MlaConfig& m, int64_t num_heads, int64_t q_len, int64_t kv_len,
                     MlaForm form) {
  const auto h = static_cast<double>(num_heads), r = static_cast<double>(m.kv_lora_rank);
  const auto nv = static_cast<double>(m.qk_nope_head_dim + m.v_head_dim);
  const double pairs = attended_pairs(q_len, kv_len);
  switch (form) {
    case MlaForm::kAbsorbed: {
      // Absorbing and un-absorbing every row; q.k and p.v over the latent width.
      const auto latent = static_cast<double>(m.latent_dim());
      return 2.0 * static_cast<double>(q_len) * h * r * nv +
             kAbsorbedAttentionFlopCost * 4.0 * h * latent * pairs;
    }
    case MlaForm::kExpanded: {
      // Up-projecting every context row; q.k over qk_nope + qk_rope and p.v over v_head_dim.
      const auto kv = static_cast<double>(m.qk_head_dim() + m.v_head_dim);
      return 2.0 * static_cast<double>(kv_len) * h * r * nv +
             kExpandedAttentionFlopCost * 2.0 * h * kv * pairs;
    }
  }
  return 0.0;
}

MlaForm choose_mla_form(const MlaConfig& m, int64_t num_heads, int64_t q_len, int64_t kv_len,
                        MlaPrefill mode) {
  if (q_len < 2) return MlaForm::kAbsorbed;
  switch (mode) {
    case MlaPrefill::kAbsorbed:
      return MlaForm::kAbsorbed;
    case MlaPrefill::kExpanded:
      return MlaForm::kExpanded;
    case MlaPrefill::kAuto:
      break;
  }
  return mla_form_cost(m, num_heads, q_len, kv_len, MlaForm::kExpanded) <
                 mla_form_cost(m, num_heads, q_len, kv_len, MlaForm::kAbsorbed)
             ? MlaForm::kExpanded
             : MlaForm::kAbsorbed;
}

int64_t Model::choose_mla_forms(const ForwardBatch& batch) {
  MlaScratch& s = mla_scratch_;
  const PagedKvLayout& layout = batch.layout;
  s.form.assign(at(layout.num_seqs), MlaForm::kAbsorbed);
  int64_t num_expanded = 0;
  for (int32_t i = 0; i < layout.num_seqs; ++i) {
    const int64_t q_len = batch.q_indptr[i + 1] - batch.q_indptr[i];
    s.form[at(i)] = choose_mla_form(config_.mla, config_.num_attention_heads, q_len,
                                    layout.kv_len(i), mla_prefill_);
    num_expanded += s.form[at(i)] == MlaForm::kExpanded ? 1 : 0;
  }
  return num_expanded;
}

Status Model::run_mla_split(int32_t layer_idx, const ForwardBatch& batch,
                            const PagedKvCacheView& cache, ThreadPool& pool) {
  if (batch.layout.first_block != nullptr) {
    return Status::InvalidArgument("MLA: the latent cache's layout starts every sequence at 0");
  }
  MlaScratch& s = mla_scratch_;
  const bool mass = !scratch_.mass.empty();
  build_sub_batch(batch, s.form, MlaForm::kAbsorbed, /*scratch_blocks=*/false,
                  mass ? &scratch_.mass_offsets : nullptr, s.absorbed);
  build_sub_batch(batch, s.form, MlaForm::kExpanded, /*scratch_blocks=*/true, nullptr, s.expanded);
  STRATA_RETURN_IF_ERROR(run_mla_absorbed_rows(layer_idx, cache, pool));
  STRATA_RETURN_IF_ERROR(run_mla_expanded(layer_idx, batch, cache, pool));
  if (mass) add_layer_mass(layer_idx, batch, pool);
  return Status::Ok();
}

Status Model::run_mla_absorbed_rows(int32_t layer_idx, const PagedKvCacheView& cache,
                                    ThreadPool& pool) {
  MlaScratch& s = mla_scratch_;
  const MlaSubBatch& sub = s.absorbed;
  const MlaConfig& m = config_.mla;
  const auto n = static_cast<int64_t>(sub.rows.size());
  if (n == 0) return Status::Ok();
  const int64_t heads = config_.num_attention_heads, qk = m.qk_head_dim();
  const int64_t latent = m.latent_dim(), v = m.v_head_dim;
  s.rows_in.resize(at(n * heads * qk));
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(s.q.data() + sub.rows[at(i)] * heads * qk, heads * qk,
                s.rows_in.data() + i * heads * qk);
  }
  STRATA_RETURN_IF_ERROR(mla_absorb(layer_idx, s.rows_in.data(), n, pool));
  s.attn_latent.resize(at(n * heads * latent));
  cpu::AttentionParams attn;
  attn.q = s.q_latent.data();
  attn.out = s.attn_latent.data();
  attn.q_indptr = sub.q_indptr.data();
  attn.layout = sub.layout(cache.block_size);
  attn.cache = cache;
  attn.num_q_heads = static_cast<int32_t>(heads);
  attn.scale = static_cast<float>(m.softmax_scale);
  if (!sub.mass_offsets.empty()) {
    attn.mass_offsets = sub.mass_offsets.data();
    attn.mass = scratch_.mass.data();
  }
  STRATA_RETURN_IF_ERROR(cpu::paged_attention(attn, pool));
  s.rows_out.resize(at(n * heads * v));
  STRATA_RETURN_IF_ERROR(mla_unabsorb(layer_idx, n, s.rows_out.data(), pool));
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(s.rows_out.data() + i * heads * v, heads * v,
                scratch_.attn.data() + sub.rows[at(i)] * heads * v);
  }
  return Status::Ok();
}

namespace {

// One query tile of one head of one expanded sequence: rows [r0, r1) of the sequence's q_len,
// at positions kv_len - q_len + r, over the head's K [kv_len, qk] and V [kv_len, v] rows.
struct ExpandedTile {
  const float* q;  // the tile's first row of this head; rows ldq apart, qk channels each
  int64_t ldq;
  const float* k;  // [kv_len, qk]
  const float* v;  // [kv_len, v]
  float* out;      // the first row's output for this head; rows ldo apart, v channels each
  int64_t ldo;
  // Null, or this head's mass rows: row r's kv_len floats at mass + mass_rows[r] where
  // mass_rows[r] >= 0 (a row whose mass is wanted).
  float* mass;
  const int64_t* mass_rows;
  int32_t rows, first_pos, kv_len;
};

// Per-thread buffers of the expanded attention.
struct TileScratch {
  std::vector<float> scores, acc, max, sum;
  std::vector<const float*> w_rows;
  std::vector<float*> acc_rows;
};

// The paged kernel's arithmetic (kernels/cpu/attention.cc) on a tile of rows that share their
// K/V reads: scores q.k over every key the tile's last row sees, scaled; per row the maximum
// over its own keys [0, pos] and exp(score - max) summed block by block; p.v per block of
// block_size keys from 0 into a per-block partial added to the row's accumulator, the weights
// past a row's position zero. Each row's value therefore depends only on its position and the
// K/V: not on the tile it shares, the chunking or the thread.
void expanded_tile(const ExpandedTile& t, int32_t qk, int32_t dv, int32_t bs, float scale,
                   bool avx512, TileScratch& s) {
  const int32_t keys = t.first_pos + t.rows;  // the last row's position + 1
  s.scores.resize(static_cast<size_t>(t.rows) * keys);
  s.acc.assign(static_cast<size_t>(t.rows) * dv, 0.0f);
  s.max.resize(static_cast<size_t>(t.rows));
  s.sum.assign(static_cast<size_t>(t.rows), 0.0f);
  if (avx512) {
    cpu::detail::matmul_nt_f32_avx512(t.q, t.ldq, t.rows, t.k, qk, keys, qk, s.scores.data(), keys);
  } else {
    cpu::detail::matmul_nt(t.q, t.ldq, t.rows, t.k, qk, keys, qk, s.scores.data(), keys);
  }
  for (int32_t r = 0; r < t.rows; ++r) {
    float* row = s.scores.data() + static_cast<int64_t>(r) * keys;
    const int32_t n = t.first_pos + r + 1;
    for (int32_t j = 0; j < n; ++j) row[j] *= scale;
    s.max[at(r)] = *std::max_element(row, row + n);
    for (int32_t b = 0; b * bs < n; ++b) {
      const int32_t count = std::min(bs, n - b * bs);
      float* w = row + b * bs;
      if (avx512) {
        s.sum[at(r)] += cpu::detail::exp_sub_and_sum_avx512(w, count, s.max[at(r)]);
        continue;
      }
      float block_sum = 0.0f;
      for (int32_t j = 0; j < count; ++j) {
        w[j] = std::exp(w[j] - s.max[at(r)]);
        block_sum += w[j];
      }
      s.sum[at(r)] += block_sum;
    }
    std::fill(row + n, row + keys, 0.0f);
  }
  s.w_rows.resize(static_cast<size_t>(t.rows));
  s.acc_rows.resize(static_cast<size_t>(t.rows));
  for (int32_t b = 0; b * bs < keys; ++b) {
    const int32_t count = std::min(bs, keys - b * bs);
    // Rows whose position precedes this block take no part: their weights here are all zero.
    const int32_t first_row = std::max(0, b * bs - t.first_pos);
    const int32_t rows = t.rows - first_row;
    for (int32_t r = 0; r < rows; ++r) {
      s.w_rows[at(r)] = s.scores.data() + static_cast<int64_t>(first_row + r) * keys + b * bs;
      s.acc_rows[at(r)] = s.acc.data() + static_cast<int64_t>(first_row + r) * dv;
    }
    const float* v = t.v + static_cast<int64_t>(b) * bs * dv;
    if (avx512) {
      cpu::detail::accumulate_pv_avx512(s.w_rows.data(), rows, v, dv, count, dv, s.acc_rows.data());
      continue;
    }
    for (int32_t r = 0; r < rows; ++r) {
      for (int32_t c = 0; c < dv; ++c) {
        float part = 0.0f;
        for (int32_t j = 0; j < count; ++j) part += s.w_rows[at(r)][j] * v[j * dv + c];
        s.acc_rows[at(r)][c] += part;
      }
    }
  }
  for (int32_t r = 0; r < t.rows; ++r) {
    const float* acc = s.acc.data() + static_cast<int64_t>(r) * dv;
    float* out = t.out + r * t.ldo;
    for (int32_t c = 0; c < dv; ++c) out[c] = acc[c] / s.sum[at(r)];
    if (t.mass == nullptr || t.mass_rows[r] < 0) continue;
    const float* w = s.scores.data() + static_cast<int64_t>(r) * keys;
    float* mass = t.mass + t.mass_rows[r];
    const int32_t n = t.first_pos + r + 1;
    for (int32_t j = 0; j < n; ++j) mass[j] = w[j] / s.sum[at(r)];
    std::fill(mass + n, mass + t.kv_len, 0.0f);
  }
}

}  // namespace

Status Model::run_mla_expanded(int32_t layer_idx, const ForwardBatch& batch,
                               const PagedKvCacheView& cache, ThreadPool& pool) {
  MlaScratch& s = mla_scratch_;
  MlaSubBatch& sub = s.expanded;
  const MlaConfig& m = config_.mla;
  const auto n = static_cast<int64_t>(sub.rows.size());
  if (n == 0) return Status::Ok();
  const int64_t heads = config_.num_attention_heads, rank = m.kv_lora_rank;
  const int64_t rope = m.qk_rope_head_dim, nope = m.qk_nope_head_dim, v = m.v_head_dim;
  const int64_t qk = m.qk_head_dim(), latent = m.latent_dim(), up_row = heads * (nope + v);
  const int64_t bs = cache.block_size;
  const auto num_blocks = static_cast<int64_t>(sub.kv_indices.size());
  const int64_t ctx_rows = num_blocks * bs;
  // The context's latent rows, block by block (a block's unused tail zeroed): ctx [ctx_rows,
  // latent] and its c_kv part c_ctx [ctx_rows, rank], the up-projection's input. Sequence i's
  // rows start at row kv_indptr[i] * bs.
  s.ctx.resize(at(ctx_rows * latent));
  s.c_ctx.resize(at(ctx_rows * rank));
  pool.parallel_for(num_blocks, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const auto i = static_cast<size_t>(
          std::upper_bound(sub.kv_indptr.begin(), sub.kv_indptr.end(), static_cast<int32_t>(j)) -
          sub.kv_indptr.begin() - 1);
      const int32_t last = sub.kv_indptr[i + 1] - 1;
      const int32_t count = j == last ? sub.last_page_len[i] : static_cast<int32_t>(bs);
      const int32_t block_id =
          batch.layout.block_at(sub.seqs[i], static_cast<int32_t>(j) - sub.kv_indptr[i]);
      float* rows = s.ctx.data() + j * bs * latent;
      cpu::load_kv_rows(cache, cpu::KvPart::kK, block_id, 0, 0, count, rows, false);
      std::fill(rows + count * latent, rows + bs * latent, 0.0f);
      for (int64_t t = 0; t < bs; ++t) {
        std::copy_n(rows + t * latent, rank, s.c_ctx.data() + (j * bs + t) * rank);
      }
    }
  });
  // Every context row's K_nope and V of every head: [ctx_rows, heads, nope + v].
  s.up.resize(at(ctx_rows * up_row));
  STRATA_RETURN_IF_ERROR(cpu::linear(s.c_ctx.data(), weights_.layers[at(layer_idx)].kv_b_proj,
                                     TensorView{}, s.up.data(), ctx_rows, pool));
  // Per head, K [heads, ctx_rows, qk] = [K_nope, k_pe] and V [heads, ctx_rows, v].
  s.k.resize(at(heads * ctx_rows * qk));
  s.v.resize(at(heads * ctx_rows * v));
  pool.parallel_for(heads * num_blocks, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t h = task / num_blocks, j = task % num_blocks;
      for (int64_t row = j * bs; row < (j + 1) * bs; ++row) {
        const float* u = s.up.data() + row * up_row + h * (nope + v);
        float* kd = s.k.data() + (h * ctx_rows + row) * qk;
        std::copy_n(u, nope, kd);
        std::copy_n(s.ctx.data() + row * latent + rank, rope, kd + nope);
        std::copy_n(u + nope, v, s.v.data() + (h * ctx_rows + row) * v);
      }
    }
  });
  // The attention mass, per head [heads, kv_len] for each wanted row, summed over the heads in
  // order below into the latent's one KV head, as the absorbed kernel sums its query heads.
  const bool mass = !scratch_.mass.empty();
  const PagedKvLayout layout = sub.layout(static_cast<int32_t>(bs));
  if (mass) {
    int64_t size = 0;
    sub.mass_offsets.assign(at(n), -1);
    for (size_t i = 0; i < sub.seqs.size(); ++i) {
      for (int32_t r = sub.q_indptr[i]; r < sub.q_indptr[i + 1]; ++r) {
        if (scratch_.mass_offsets[at(sub.rows[at(r)])] < 0) continue;
        sub.mass_offsets[at(r)] = size;
        size += heads * layout.kv_len(static_cast<int32_t>(i));
      }
    }
    s.mass_x.resize(at(size));
  }
  // Tasks: (sequence, head, tile of kTileRows rows), the longest (latest) tiles first.
  constexpr int32_t kTileRows = 16;
  struct Task {
    int32_t seq, head, r0, r1;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < sub.seqs.size(); ++i) {
    const int32_t q_len = sub.q_indptr[i + 1] - sub.q_indptr[i];
    for (int32_t r1 = q_len; r1 > 0; r1 -= kTileRows) {
      for (int32_t h = 0; h < heads; ++h) {
        tasks.push_back({static_cast<int32_t>(i), h, std::max(0, r1 - kTileRows), r1});
      }
    }
  }
  const bool avx512 = cpu::best_cpu_isa() == cpu::CpuIsa::kAvx512;
  const auto scale = static_cast<float>(m.softmax_scale);
  cpu::detail::parallel_dynamic(
      pool, static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
        thread_local TileScratch scratch;
        for (int64_t ti = begin; ti < end; ++ti) {
          const Task& task = tasks[at(ti)];
          const auto i = static_cast<int32_t>(task.seq);
          const int32_t kv_len = layout.kv_len(i), q_len = sub.q_indptr[i + 1] - sub.q_indptr[i];
          const int32_t row0 = sub.q_indptr[i] + task.r0;  // the tile's first row in sub.rows
          const int64_t ctx0 = int64_t{sub.kv_indptr[at(i)]} * bs;
          ExpandedTile t;
          t.q = s.q.data() + (sub.rows[at(row0)] * heads + task.head) * qk;
          t.ldq = heads * qk;
          t.k = s.k.data() + (task.head * ctx_rows + ctx0) * qk;
          t.v = s.v.data() + (task.head * ctx_rows + ctx0) * v;
          t.out = scratch_.attn.data() + (sub.rows[at(row0)] * heads + task.head) * v;
          t.ldo = heads * v;
          t.rows = task.r1 - task.r0;
          t.first_pos = kv_len - q_len + task.r0;
          t.kv_len = kv_len;
          t.mass = nullptr;
          t.mass_rows = nullptr;
          if (mass) {  // a wanted row's head h at its offset + h * kv_len
            t.mass_rows = sub.mass_offsets.data() + row0;
            t.mass = s.mass_x.data() + int64_t{task.head} * kv_len;
          }
          expanded_tile(t, static_cast<int32_t>(qk), static_cast<int32_t>(v),
                        static_cast<int32_t>(bs), scale, avx512, scratch);
        }
      });
  if (!mass) return Status::Ok();
  for (size_t i = 0; i < sub.seqs.size(); ++i) {
    const int64_t kv_len = layout.kv_len(static_cast<int32_t>(i));
    for (int32_t r = sub.q_indptr[i]; r < sub.q_indptr[i + 1]; ++r) {
      if (sub.mass_offsets[at(r)] < 0) continue;
      const float* heads_mass = s.mass_x.data() + sub.mass_offsets[at(r)];
      float* out = scratch_.mass.data() + scratch_.mass_offsets[at(sub.rows[at(r)])];
      for (int64_t j = 0; j < kv_len; ++j) {
        float sum = 0.0f;
        for (int64_t h = 0; h < heads; ++h) sum += heads_mass[h * kv_len + j];
        out[j] = sum;
      }
    }
  }
  return Status::Ok();
}

}  // namespace strata::model

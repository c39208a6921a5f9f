// Model's Multi-head Latent Attention (DeepSeek-V2 / V3) on the CPU: the latent cache and the
// absorbed form of attention over it (the expanded form: model_mla_prefill.cc).
//
// Per token and layer the cache holds one latent row c = [rms_norm(c_kv) (kv_lora_rank),
// rope(k_pe) (qk_rope_head_dim)] (kv::KvSpec::latent). transformers expands it per head to
// k_h = [W_UK_h c_kv, k_pe] and v_h = W_UV_h c_kv (W_UK_h, W_UV_h: head h's rows of kv_b_proj);
// since q_h . k_h = (W_UK_h^T q_nope_h) . c_kv + q_pe_h . k_pe, each head's query is absorbed
// instead: q'_h = [W_UK_h^T q_nope_h, q_pe_h] attends to the latent rows as MQA with one KV head
// of kv_lora_rank + qk_rope_head_dim channels, V being the same rows' first kv_lora_rank
// channels, and head h's output is W_UV_h applied to its attention-weighted latent. The paged
// attention kernel runs unchanged (its view's v_data is its k_data), so decode, prefill, chunks
// and prefix hits all read the one latent pool and keep the kernel's determinism.
//
// Cost per token and layer (H heads, R kv_lora_rank, P rope dims, N nope dims, V v_head_dim, L
// context): absorption 2*H*N*R + un-absorption 2*H*R*V flops, then attention 4*H*(R+P)*L flops
// over L*(R+P) cached elements read once for all heads. Decode rows always take this form; a
// prefill chunk may take the expanded form instead (model_mla_prefill.cc, mla_prefill.h), which
// up-projects the chunk's whole context and runs ordinary multi-head attention
// (docs/architecture.md, "DeepSeek").

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "model/index_cast.h"
#include "model/model.h"
#include "model/rope.h"

namespace strata::model {
namespace {

// transformers (and DeepSeek's own code) build q_a_layernorm and kv_a_layernorm without the
// config's rms_norm_eps: RMSNorm's default epsilon.
constexpr float kLatentNormEps = 1e-6f;

// RMSNorm of num_rows rows of weight.dim(0) elements with the latent norms' epsilon.
Status latent_rms_norm(float* x, TensorView weight, int64_t num_rows, ThreadPool& pool) {
  cpu::RmsNormParams p;
  p.x = x;
  p.out = x;
  p.weight = weight;
  p.num_rows = num_rows;
  p.eps = kLatentNormEps;
  return cpu::rms_norm(p, pool);
}
int64_t span_size(size_t n) { return static_cast<int64_t>(n); }

// Rotates x[0, dim) by (cos, sin) per channel pair: DeepSeek's interleaved pairs (2i, 2i + 1), or
// rotate_half's (i, i + dim / 2).
void rotate(float* x, int64_t dim, const float* cos_t, const float* sin_t, bool interleave) {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleave ? 2 * i : i, b = interleave ? 2 * i + 1 : i + half;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * cos_t[i] - x1 * sin_t[i];
    x[b] = x1 * cos_t[i] + x0 * sin_t[i];
  }
}

// A [rows, cols] view of `rows` consecutive rows of a 2-D weight, from row first.
TensorView row_slice(TensorView w, int64_t first, int64_t rows) {
  TensorView v = w;
  v.data = static_cast<const char*>(w.data) + first * w.dim(1) * dtype_size(w.dtype);
  v.shape = {rows, w.dim(1), 0, 0};
  return v;
}

}  // namespace

void Model::prepare_mla() {
  if (!config_.mla.enabled()) return;
  const MlaConfig& m = config_.mla;
  const int64_t heads = config_.num_attention_heads, rank = m.kv_lora_rank;
  const int64_t nope = m.qk_nope_head_dim, per_head = nope + m.v_head_dim;
  mla_.resize(at(config_.num_hidden_layers));
  for (size_t l = 0; l < mla_.size(); ++l) {
    const TensorView kv_b = weights_.layers[l].kv_b_proj;  // [heads * (nope + v), rank]
    const int64_t elem = dtype_size(kv_b.dtype);
    MlaLayer& layer = mla_[l];
    // W_UK_h^T [rank, nope] per head: the same elements transposed, in the checkpoint's dtype.
    layer.uk_t.resize(at(heads * rank * nope * elem));
    const auto* src = static_cast<const char*>(kv_b.data);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < nope; ++d) {
        for (int64_t c = 0; c < rank; ++c) {
          std::memcpy(layer.uk_t.data() + ((h * rank + c) * nope + d) * elem,
                      src + ((h * per_head + d) * rank + c) * elem, at(elem));
        }
      }
    }
    layer.uk_t_head.resize(at(heads));
    layer.uv_head.resize(at(heads));
    for (int64_t h = 0; h < heads; ++h) {
      TensorView uk;
      uk.data = layer.uk_t.data() + h * rank * nope * elem;
      uk.dtype = kv_b.dtype;
      uk.rank = 2;
      uk.shape = {rank, nope, 0, 0};
      layer.uk_t_head[at(h)] = uk;
      layer.uv_head[at(h)] = row_slice(kv_b, h * per_head + nope, m.v_head_dim);
    }
  }
}

Status Model::mla_project(int32_t layer_idx, const ForwardBatch& batch, ThreadPool& pool) {
  const LayerWeights& w = weights_.layers[at(layer_idx)];
  const MlaConfig& m = config_.mla;
  MlaScratch& s = mla_scratch_;
  const int64_t n = span_size(batch.token_ids.size()), heads = config_.num_attention_heads;
  const int64_t rank = m.kv_lora_rank, rope = m.qk_rope_head_dim, qk = m.qk_head_dim();
  const int64_t latent = m.latent_dim();
  const float* x = scratch_.normed.data();
  s.q.resize(at(n * heads * qk));
  if (m.q_lora_rank > 0) {
    s.q_a.resize(at(n * m.q_lora_rank));
    STRATA_RETURN_IF_ERROR(cpu::linear(x, w.q_a_proj, TensorView{}, s.q_a.data(), n, pool));
    STRATA_RETURN_IF_ERROR(latent_rms_norm(s.q_a.data(), w.q_a_norm, n, pool));
    STRATA_RETURN_IF_ERROR(
        cpu::linear(s.q_a.data(), w.q_b_proj, TensorView{}, s.q.data(), n, pool));
  } else {
    STRATA_RETURN_IF_ERROR(cpu::linear(x, w.q_proj, TensorView{}, s.q.data(), n, pool));
  }
  s.latent.resize(at(n * latent));
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.kv_a_proj, TensorView{}, s.latent.data(), n, pool));
  // kv_a_layernorm over each row's first kv_lora_rank channels.
  s.c_kv.resize(at(n * rank));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(s.latent.data() + t * latent, rank, s.c_kv.data() + t * rank);
  }
  STRATA_RETURN_IF_ERROR(latent_rms_norm(s.c_kv.data(), w.kv_a_norm, n, pool));
  // RoPE on each head's q_pe and the shared k_pe, with YaRN's attention factor on cos and sin.
  const double scaling = rope_attention_factor(config_.rope);
  const bool interleave = m.rope_interleave;
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        std::vector<float> cos_t(at(rope / 2)), sin_t(at(rope / 2));
        for (int64_t t = begin; t < end; ++t) {
          std::copy_n(s.c_kv.data() + t * rank, rank, s.latent.data() + t * latent);
          const double position = batch.positions[at(t)];
          for (int64_t i = 0; i < rope / 2; ++i) {
            const double angle = position * static_cast<double>(inv_freq_[at(i)]);
            cos_t[at(i)] = static_cast<float>(std::cos(angle) * scaling);
            sin_t[at(i)] = static_cast<float>(std::sin(angle) * scaling);
          }
          rotate(s.latent.data() + t * latent + rank, rope, cos_t.data(), sin_t.data(), interleave);
          for (int64_t h = 0; h < heads; ++h) {
            rotate(s.q.data() + (t * heads + h) * qk + m.qk_nope_head_dim, rope, cos_t.data(),
                   sin_t.data(), interleave);
          }
        }
      },
      /*min_chunk=*/8);
  return Status::Ok();
}

Status Model::mla_absorb(int32_t layer_idx, const float* q, int64_t n, ThreadPool& pool) {
  // The absorbed query [n, heads, latent]: W_UK_h^T q_nope_h, then q_pe_h.
  const MlaConfig& m = config_.mla;
  MlaScratch& s = mla_scratch_;
  const int64_t heads = config_.num_attention_heads, rank = m.kv_lora_rank;
  const int64_t rope = m.qk_rope_head_dim, qk = m.qk_head_dim(), latent = m.latent_dim();
  const MlaLayer& absorbed = mla_[at(layer_idx)];
  const int64_t nope = m.qk_nope_head_dim;
  s.q_latent.resize(at(n * heads * latent));
  s.head_in.resize(at(n * std::max(nope, rank)));
  s.head_out.resize(at(n * std::max(rank, m.v_head_dim)));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(q + (t * heads + h) * qk, nope, s.head_in.data() + t * nope);
    }
    STRATA_RETURN_IF_ERROR(cpu::linear(s.head_in.data(), absorbed.uk_t_head[at(h)], TensorView{},
                                       s.head_out.data(), n, pool));
    for (int64_t t = 0; t < n; ++t) {
      float* dst = s.q_latent.data() + (t * heads + h) * latent;
      std::copy_n(s.head_out.data() + t * rank, rank, dst);
      std::copy_n(q + (t * heads + h) * qk + nope, rope, dst + rank);
    }
  }
  return Status::Ok();
}

Status Model::mla_unabsorb(int32_t layer_idx, int64_t n, float* out, ThreadPool& pool) {
  // Head h's output W_UV_h o_h from its latent o_h (the first kv_lora_rank channels).
  const MlaConfig& m = config_.mla;
  MlaScratch& s = mla_scratch_;
  const int64_t heads = config_.num_attention_heads, rank = m.kv_lora_rank;
  const int64_t latent = m.latent_dim(), v = m.v_head_dim;
  const MlaLayer& absorbed = mla_[at(layer_idx)];
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(s.attn_latent.data() + (t * heads + h) * latent, rank,
                  s.head_in.data() + t * rank);
    }
    STRATA_RETURN_IF_ERROR(cpu::linear(s.head_in.data(), absorbed.uv_head[at(h)], TensorView{},
                                       s.head_out.data(), n, pool));
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(s.head_out.data() + t * v, v, out + (t * heads + h) * v);
    }
  }
  return Status::Ok();
}

Status Model::run_mla_attention(int32_t layer_idx, const ForwardBatch& batch, const KvPools& kv,
                                ThreadPool& pool) {
  if (kv_abs_max_ != nullptr || kv_quant_probe_ != nullptr) {
    return Status::Unsupported("MLA: the latent cache is not quantized (no KV scales to measure)");
  }
  STRATA_RETURN_IF_ERROR(mla_project(layer_idx, batch, pool));
  const MlaConfig& m = config_.mla;
  MlaScratch& s = mla_scratch_;
  const int64_t n = span_size(batch.token_ids.size()), heads = config_.num_attention_heads;
  const int64_t latent = m.latent_dim();
  const kv::KvLayerSlot slot =
      kv.slots.empty() ? kv::KvLayerSlot{0, layer_idx} : kv.slots[at(layer_idx)];
  kv::HostKvBuffer* buffer = kv.pools[at(slot.group)];
  const PagedKvCacheView cache = buffer->layer_view(slot.index);
  if (!buffer->layout().spec().latent || cache.head_dim != latent || cache.num_kv_heads != 1) {
    return Status::InvalidArgument("MLA: the KV pool is not this model's latent cache");
  }
  cpu::AppendKvParams append;
  append.k = s.latent.data();
  append.v = s.latent.data();  // the view's V is its K: the same row lands on itself
  append.slot_mapping = batch.slot_mapping.data();
  append.num_tokens = n;
  append.cache = cache;
  append.num_cache_blocks = buffer->num_blocks();
  STRATA_RETURN_IF_ERROR(cpu::append_kv(append, pool));
  if (choose_mla_forms(batch) > 0) return run_mla_split(layer_idx, batch, cache, pool);
  STRATA_RETURN_IF_ERROR(mla_absorb(layer_idx, s.q.data(), n, pool));
  s.attn_latent.resize(at(n * heads * latent));
  cpu::AttentionParams attn;
  attn.q = s.q_latent.data();
  attn.out = s.attn_latent.data();
  attn.q_indptr = batch.q_indptr.data();
  attn.layout = batch.layout;
  attn.cache = cache;
  attn.num_q_heads = static_cast<int32_t>(heads);
  attn.scale = static_cast<float>(m.softmax_scale);
  if (!scratch_.mass.empty()) {
    attn.mass_offsets = scratch_.mass_offsets.data();
    attn.mass = scratch_.mass.data();
  }
  STRATA_RETURN_IF_ERROR(cpu::paged_attention(attn, pool));
  if (!scratch_.mass.empty()) add_layer_mass(layer_idx, batch, pool);
  return mla_unabsorb(layer_idx, n, scratch_.attn.data(), pool);
}

}  // namespace strata::model

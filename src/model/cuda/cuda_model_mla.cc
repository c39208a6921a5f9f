// CudaModel's Multi-head Latent Attention (DeepSeek-V2 / V3; docs/gpu-engine.md, "DeepSeek"):
// the absorbed form over the latent pool, as the CPU engine's model_mla.cc computes it.
//
//   normed -> q_proj, or q_a_proj -> q_a_layernorm -> q_b_proj      q [t, heads, nope | rope] bf16
//   normed -> kv_a_proj_with_mqa                                     kv_a [t, 576] fp32
//   mla_rope_append: rmsnorm(c_kv), rope(k_pe) -> the latent pool at the slots;
//                    rope(q_pe) -> q_latent[:, :, 512:576]
//   per head h: q_latent[:, h, 0:512] = q_nope_h W_UK_h               (one GEMM per head)
//   mla_decode: o_latent[t, h] = softmax(scale q_latent[t, h] . C^T) C[:, :512]
//   per head h: attn[:, h] = o_latent[:, h] W_UV_h^T                   (one GEMM per head)
//
// Prompt rows (prefill, chunks over a cached prefix) take the same kernel: each row is a
// "sequence" of its own whose latent rows are its sequence's first position + 1 tokens
// (mla_gpu.h, build_mla_row_layout), so causality comes from the layout and the pool stays the
// one source of K/V. It costs each prompt row a pass over its context's latent rows (the
// kernel's work is that of an unfused causal prefill, with no tile reuse across rows); the
// expanded form (up-projecting the context per head, then the prefill kernel) is the other
// choice, measured against this one later (docs/gpu-engine.md).
//
// The per-head products are H launches of the runner's Gemm (strided views of one buffer), the
// same in a decode graph as eagerly.

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/mla_ops.h"
#include "kernels/cuda/model_ops.h"
#include "model/cuda/cuda_model_impl.h"
#include "model/mla_gpu.h"
#include "model/rope.h"

namespace strata::model {
namespace {

static_assert(cuda::kMlaLatentDim == kGpuMlaKvLoraRank + kGpuMlaRopeDim);
static_assert(cuda::kMlaValueDim == kGpuMlaKvLoraRank);
static_assert(cuda::kMlaRopeDim == kGpuMlaRopeDim);
static_assert(cuda::kMlaHeadQuantum == kGpuMlaHeadQuantum);
static_assert(cuda::kMlaMaxHeads == kGpuMlaMaxHeads);

// q_a_layernorm and kv_a_layernorm's epsilon: RMSNorm's default, as transformers builds them
// (and the CPU engine runs them).
constexpr float kLatentNormEps = 1e-6f;

// The MLA decode workspace holds kMlaMaxSplits splits for up to kMlaSplitSeqs sequences (the
// planner gives a launch of more sequences fewer splits, which its many blocks do not need): at
// 128 heads 67 MB, where sizing it for max_num_seqs (256) would take 539 MB.
constexpr int32_t kMlaMaxSplits = 8;
constexpr int32_t kMlaSplitSeqs = 32;

Result<cuda::DeviceBuffer> zeroed(int64_t bytes) {
  Result<cuda::DeviceBuffer> b =
      cuda::DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(bytes, 16)));
  if (!b.ok()) return b.status();
  STRATA_CUDA_CHECK(cudaMemset(b->data(), 0, b->bytes()));
  return b;
}

}  // namespace

int64_t CudaModel::Impl::allocate_mla_scratch() {
  const MlaConfig& m = config.mla;
  if (!m.enabled()) return 0;
  const int64_t t = options.max_num_tokens, heads = config.num_attention_heads;
  auto take_buffer = [](Result<cuda::DeviceBuffer> r) {
    if (!r.ok()) throw Error("GPU MLA scratch: " + r.status().to_string());
    return std::move(r).value();
  };
  mla_q = take_buffer(zeroed(t * heads * m.qk_head_dim() * 2));
  if (m.q_lora_rank > 0) {
    mla_q_a = take_buffer(zeroed(t * m.q_lora_rank * 4));
    mla_q_a_normed = take_buffer(zeroed(t * m.q_lora_rank * 2));
  }
  mla_kv_a = take_buffer(zeroed(t * m.latent_dim() * 4));
  mla_q_latent = take_buffer(zeroed(t * heads * cuda::kMlaLatentDim * 2));
  mla_o_latent = take_buffer(zeroed(t * heads * cuda::kMlaValueDim * 2));
  mla_workspace = take_buffer(zeroed(static_cast<int64_t>(cuda::mla_decode_workspace_bytes(
      std::min(options.max_num_seqs, kMlaSplitSeqs), static_cast<int32_t>(heads),
      kMlaMaxSplits))));
  // The per-row layout at its largest: every row of a step reads at most a longest sequence's
  // blocks. Sized once here (so the pool's budget counts it and no step allocates).
  const int64_t max_len =
      options.max_model_len > 0 ? options.max_model_len : config.max_position_embeddings;
  mla_rows_capacity = t * (max_len / options.block_size + 1);
  mla_rows = take_buffer(zeroed((2 * t + 1 + mla_rows_capacity) * 4));
  int64_t bytes = 0;
  for (const cuda::DeviceBuffer* b : {&mla_q, &mla_q_a, &mla_q_a_normed, &mla_kv_a, &mla_q_latent,
                                      &mla_o_latent, &mla_workspace, &mla_rows}) {
    bytes += static_cast<int64_t>(b->bytes());
  }
  return bytes;
}

Status CudaModel::Impl::upload_mla_rows(const ForwardBatch& batch) {
  if (!config.mla.enabled()) return Status::Ok();
  // Every sequence one row: the step's own layout is the per-row one (the graphs' case).
  bool decode_only = true;
  for (int32_t s = 0; s < batch.layout.num_seqs; ++s) {
    decode_only =
        decode_only &&
        batch.q_indptr[static_cast<size_t>(s) + 1] - batch.q_indptr[static_cast<size_t>(s)] == 1;
  }
  if (decode_only) return Status::Ok();
  MlaRowLayout rows;
  build_mla_row_layout(batch.layout, batch.q_indptr, rows);
  const auto num_rows = static_cast<int64_t>(rows.kv_last_page_len.size());
  const auto nnz = static_cast<int64_t>(rows.kv_indices.size());
  if (num_rows > options.max_num_tokens || nnz > mla_rows_capacity) {
    return Status::OutOfRange("MLA: a step's per-row layout of " + std::to_string(nnz) +
                              " block entries exceeds max_num_tokens x the longest sequence's "
                              "blocks (" +
                              std::to_string(mla_rows_capacity) + ")");
  }
  // [indptr (max_num_tokens + 1) | last page lengths (max_num_tokens) | indices]
  auto* base = mla_rows.as<int32_t>();
  int32_t* indptr = base;
  int32_t* last = base + options.max_num_tokens + 1;
  int32_t* indices = last + options.max_num_tokens;
  cudaStream_t s = stream.get();
  STRATA_CUDA_CHECK(cudaMemcpyAsync(indptr, rows.kv_indptr.data(), rows.kv_indptr.size() * 4,
                                    cudaMemcpyHostToDevice, s));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(last, rows.kv_last_page_len.data(),
                                    rows.kv_last_page_len.size() * 4, cudaMemcpyHostToDevice, s));
  if (nnz > 0) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(indices, rows.kv_indices.data(), rows.kv_indices.size() * 4,
                                      cudaMemcpyHostToDevice, s));
  }
  // The host vectors are freed on return: the copies from pageable memory must be done.
  STRATA_RETURN_IF_ERROR(stream.synchronize());
  mla_row_view = PagedKvLayout{};
  mla_row_view.kv_indptr = indptr;
  mla_row_view.kv_indices = indices;
  mla_row_view.kv_last_page_len = last;
  mla_row_view.num_seqs = static_cast<int32_t>(num_rows);
  mla_row_view.block_size = batch.layout.block_size;
  return Status::Ok();
}

Status CudaModel::Impl::run_mla_attention(int32_t l, const CudaStepInputs::Device& in) {
  const CudaLayerWeights& w = weights.layers[static_cast<size_t>(l)];
  const MlaConfig& m = config.mla;
  const int64_t t = in.num_tokens, h = config.hidden_size, heads = config.num_attention_heads;
  const int64_t qk = m.qk_head_dim(), nope = m.qk_nope_head_dim, v = m.v_head_dim;
  const int64_t rank = cuda::kMlaValueDim, latent = cuda::kMlaLatentDim;
  const DeviceTensor none;
  if (m.q_lora_rank > 0) {
    const int64_t r = m.q_lora_rank;
    STRATA_RETURN_IF_ERROR(gemm_run(normed.data(), h, w.q_a_proj, none, none, mla_q_a.data(), r,
                                    DType::kF32, false, t, r, h));
    cuda::RmsNormParams qn;
    qn.residual = mla_q_a.as<float>();
    qn.weight = w.q_a_norm.data();
    qn.weight_dtype = w.q_a_norm.dtype;
    qn.out = mla_q_a_normed.data();
    qn.num_rows = static_cast<int32_t>(t);
    qn.hidden = static_cast<int32_t>(r);
    qn.eps = kLatentNormEps;
    STRATA_RETURN_IF_ERROR(cuda::rms_norm(qn, stream.get()));
    STRATA_RETURN_IF_ERROR(gemm_run(mla_q_a_normed.data(), r, w.q_b_proj, none, none, mla_q.data(),
                                    heads * qk, DType::kBF16, false, t, heads * qk, r));
  } else {
    STRATA_RETURN_IF_ERROR(gemm_run(normed.data(), h, w.q_proj, none, none, mla_q.data(),
                                    heads * qk, DType::kBF16, false, t, heads * qk, h));
  }
  STRATA_RETURN_IF_ERROR(gemm_run(normed.data(), h, w.kv_a_proj, none, none, mla_kv_a.data(),
                                  latent, DType::kF32, false, t, latent, h));
  const PagedKvCacheView cache = layout.layer_view(pool.data(), l);
  cuda::MlaRopeAppendParams ra;
  ra.kv_a = mla_kv_a.as<float>();
  ra.kv_a_stride = latent;
  ra.kv_norm = static_cast<const float*>(w.kv_a_norm.data());
  ra.eps = kLatentNormEps;
  ra.q = mla_q.data();
  ra.q_stride = heads * qk;
  ra.q_head_dim = static_cast<int32_t>(qk);
  ra.q_latent = mla_q_latent.data();
  ra.q_latent_stride = heads * latent;
  ra.num_heads = static_cast<int32_t>(heads);
  ra.positions = in.positions;
  ra.inv_freq = inv_freq.as<float>();
  ra.attention_scaling = static_cast<float>(rope_attention_factor(config.rope));
  ra.interleave = m.rope_interleave;
  ra.slot_mapping = in.slot_mapping;
  ra.cache = cache;
  ra.num_tokens = in.num_tokens;
  STRATA_RETURN_IF_ERROR(cuda::mla_rope_append(ra, stream.get()));
  // The absorption: head h's q_nope [t, nope] times W_UK_h^T's rows [512, nope].
  const auto* q = mla_q.as<uint16_t>();
  auto* q_latent = mla_q_latent.as<uint16_t>();
  const auto* uk_t = static_cast<const uint16_t*>(w.uk_t.data());
  for (int64_t hd = 0; hd < heads; ++hd) {
    cuda::GemmParams p;
    p.a = q + hd * qk;
    p.lda = heads * qk;
    p.w = uk_t + hd * rank * nope;
    p.ldw = nope;
    p.d = q_latent + hd * latent;
    p.ldd = heads * latent;
    p.d_dtype = DType::kBF16;
    p.m = t;
    p.n = rank;
    p.k = nope;
    STRATA_RETURN_IF_ERROR(gemm.run(p, stream.get()));
  }
  cuda::MlaDecodeParams d;
  d.q = mla_q_latent.data();
  d.q_seq_stride = heads * latent;
  d.o = mla_o_latent.data();
  d.o_seq_stride = heads * rank;
  d.layout = in.num_decode_seqs == in.layout.num_seqs ? in.layout : mla_row_view;
  if (d.layout.num_seqs != in.num_tokens) {
    return Status::Internal("MLA: the step's per-row layout was not uploaded");
  }
  d.cache = cache;
  d.num_heads = static_cast<int32_t>(heads);
  d.sm_scale = static_cast<float>(m.softmax_scale);
  d.max_kv_len = in.max_kv_len;
  d.workspace = mla_workspace.data();
  d.workspace_bytes = mla_workspace.bytes();
  STRATA_RETURN_IF_ERROR(cuda::mla_decode(d, stream.get()));
  // The up-projection: head h's latent output [t, 512] times W_UV_h's rows [v, 512].
  const auto* o_latent = mla_o_latent.as<uint16_t>();
  const auto* kv_b = static_cast<const uint16_t*>(w.kv_b_proj.data());
  auto* out = attn.as<uint16_t>();
  for (int64_t hd = 0; hd < heads; ++hd) {
    cuda::GemmParams p;
    p.a = o_latent + hd * rank;
    p.lda = heads * rank;
    p.w = kv_b + (hd * (nope + v) + nope) * rank;
    p.ldw = rank;
    p.d = out + hd * v;
    p.ldd = heads * v;
    p.d_dtype = DType::kBF16;
    p.m = t;
    p.n = v;
    p.k = rank;
    STRATA_RETURN_IF_ERROR(gemm.run(p, stream.get()));
  }
  return Status::Ok();
}

}  // namespace strata::model

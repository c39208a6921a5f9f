#include "model/cuda/cuda_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/block_copy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/stream.h"
#include "model/cuda/cuda_block_mover.h"
#include "model/cuda/cuda_model_impl.h"
#include "model/cuda/cuda_step_inputs.h"
#include "model/cuda/cuda_weights.h"
#include "model/mla_gpu.h"
#include "model/rope.h"

namespace strata::model {
namespace {

template <typename T>
T take(Result<T> r, const char* what) {
  if (!r.ok()) throw Error(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

Status cuda_status(cudaError_t err) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err));
}

void check(const Status& s, const char* what) {
  if (!s.ok()) throw Error(std::string(what) + ": " + s.to_string());
}

cuda::DeviceBuffer device_bytes(int64_t bytes, const char* what) {
  return take(cuda::DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(bytes, 16))), what);
}

// Gemma's sqrt(hidden_size) as transformers applies it and the CPU engine does (model.cc): a
// float32 scalar cast to the embedding table's dtype (the checkpoint's); 1 for other models.
float gpu_embedding_scale(const ModelConfig& c, DType table_dtype) {
  if (!c.scale_embeddings) return 1.0f;
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  if (table_dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(scale));
  if (table_dtype == DType::kF16) return f16_to_f32(f32_to_f16(scale));
  return scale;
}

// Rows of logits computed at once (the LM head's GEMM M); the buffer is kLogitsChunk x vocab fp32.
constexpr int32_t kLogitsChunk = 512;

// Decode graphs are keyed by the batch padded to one of these sizes (1, 2, 4, then multiples of
// 8, as vLLM captures) and by a power-of-two bound on the KV length (from kMinGraphKvBound) that
// sizes the split-KV plan baked into the graph; any length up to the bound is still correct (the
// last split runs to the sequence's end), the bound only keeps the splits balanced.
constexpr int32_t kMinGraphKvBound = 256;
int32_t graph_batch_size(int32_t n) {
  if (n <= 2) return n;
  if (n <= 4) return 4;
  return (n + 7) / 8 * 8;
}

// MLA's (DeepSeek): the kernels' shapes (mla_gpu.h), a bf16 latent cache with no per-layer
// exceptions, and BF16 weights (the latent products take no FP8 path).
void check_mla_shapes(const ModelConfig& c, const CudaModelOptions& o) {
  if (!c.mla.enabled()) return;
  if (const std::string why = gpu_mla_refusal(c); !why.empty()) throw Error(why);
  const std::string name(architecture_name(c.architecture));
  if (o.kv_dtype != DType::kBF16 || !o.kv_layer_dtypes.empty()) {
    throw Error("--device cuda: " + name +
                "'s MLA latent cache is bfloat16 only on the GPU (--kv-cache-dtype auto or "
                "bfloat16, no --kv-cache-dtype-skip-layers)");
  }
  if (o.weight_dtype != DType::kBF16) {
    throw Error("--device cuda: " + name +
                " runs with bfloat16 weights only (no --quantization fp8)");
  }
}

// The MoE kernels' limits (kernels/cuda/moe.h), checked once at start rather than per launch.
void check_moe_shapes(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  if (!m.any_moe_layer()) return;
  auto refuse = [&](const std::string& what) {
    throw Error("--device cuda: the MoE layers' " + what + " (the GPU MoE kernels' limits)");
  };
  if (c.hidden_size % 8 != 0 || m.moe_intermediate_size % 8 != 0) {
    refuse("hidden_size (" + std::to_string(c.hidden_size) + ") and moe_intermediate_size (" +
           std::to_string(m.moe_intermediate_size) + ") must be multiples of 8");
  }
  if (m.num_experts < 1 || m.num_experts > cuda::kMoeMaxExperts) {
    refuse("num_experts (" + std::to_string(m.num_experts) + ") must be in [1, " +
           std::to_string(cuda::kMoeMaxExperts) + "]");
  }
  if (m.num_experts_per_tok < 1 || m.num_experts_per_tok > cuda::kMoeMaxTopK) {
    refuse("num_experts_per_tok (" + std::to_string(m.num_experts_per_tok) + ") must be in [1, " +
           std::to_string(cuda::kMoeMaxTopK) + "]");
  }
  if (m.num_groups < 1 || m.num_groups > cuda::kMoeMaxGroups) {
    refuse("n_group (" + std::to_string(m.num_groups) + ") must be in [1, " +
           std::to_string(cuda::kMoeMaxGroups) + "]");
  }
}

}  // namespace

Status check_layer_dtypes(const ModelConfig& config, DType kv_dtype,
                          std::span<const DType> layer_dtypes) {
  if (layer_dtypes.empty()) return Status::Ok();
  if (layer_dtypes.size() != static_cast<size_t>(config.num_hidden_layers)) {
    return Status::InvalidArgument("per-layer KV dtypes for " +
                                   std::to_string(layer_dtypes.size()) + " layers, the model has " +
                                   std::to_string(config.num_hidden_layers));
  }
  for (const DType d : layer_dtypes) {
    if (d != DType::kBF16 && d != kv_dtype) {
      return Status::InvalidArgument("a layer's KV dtype must be bfloat16 or the cache's (" +
                                     std::string(dtype_name(kv_dtype)) + "), not " +
                                     std::string(dtype_name(d)));
    }
  }
  return Status::Ok();
}

kv::KvSpec kv_spec(const ModelConfig& c, DType dtype) {
  kv::KvSpec spec{static_cast<int32_t>(c.num_hidden_layers),
                  static_cast<int32_t>(c.num_key_value_heads), static_cast<int32_t>(c.head_dim),
                  dtype};
  if (c.mla.enabled()) {  // one latent row per token and layer, as the CPU engine's Model::kv_spec
    spec.num_kv_heads = 1;
    spec.head_dim = static_cast<int32_t>(c.mla.latent_dim());
    spec.latent = true;
  }
  return spec;
}

void CudaModel::Impl::allocate_scratch() {
  const int64_t t = options.max_num_tokens;
  const int64_t h = config.hidden_size;
  // The widest dense MLP: the dense layers' (none when every layer is MoE, as in Mixtral) and an
  // MoE model's shared experts' (DeepSeek).
  bool any_dense = false;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    any_dense = any_dense || !config.moe.is_moe(l);
  }
  const int64_t inter =
      std::max(any_dense ? config.intermediate_size : 0, config.moe.shared_intermediate_size);
  residual = device_bytes(t * h * 4, "GPU activations");
  normed = device_bytes(t * h * 2, "GPU activations");
  // MLA (DeepSeek) has its own attention scratch (allocate_mla_scratch): no fused qkv rows and
  // no GQA decode workspace, which at 128 heads would hold a gigabyte for nothing.
  const bool mla = config.mla.enabled();
  qkv = device_bytes(mla ? 0 : t * qkv_width() * 2, "GPU activations");
  attn = device_bytes(t * q_width() * 2, "GPU activations");
  gate_up = device_bytes(t * 2 * inter * 2, "GPU activations");
  act = device_bytes(t * inter * 2, "GPU activations");
  logits = device_bytes(int64_t{kLogitsChunk} * config.vocab_size * 4, "GPU logits");
  sampled_tokens = device_bytes(t * 4, "GPU sampling");
  sampled_logprobs = device_bytes(t * 4, "GPU sampling");
  void* pinned_tokens = nullptr;
  void* pinned_logprobs = nullptr;
  check(cuda_status(cudaMallocHost(&pinned_tokens, static_cast<size_t>(t) * 4)), "pinned draws");
  host_tokens.reset(static_cast<int32_t*>(pinned_tokens));
  check(cuda_status(cudaMallocHost(&pinned_logprobs, static_cast<size_t>(t) * 4)), "pinned draws");
  host_logprobs.reset(static_cast<float*>(pinned_logprobs));
  void* pinned_signal = nullptr;
  check(cuda_status(cudaMallocHost(&pinned_signal, 2 * sizeof(uint32_t))), "pinned mask signal");
  mask_signal.reset(static_cast<uint32_t*>(pinned_signal));
  mask_thread = std::make_unique<MaskThread>(mask_signal.get());
  workspace = device_bytes(
      mla ? 0
          : static_cast<int64_t>(cuda::decode_attention_workspace_bytes(
                options.max_num_seqs, static_cast<int32_t>(config.num_attention_heads),
                static_cast<int32_t>(config.head_dim), cuda::kMaxDecodeSplits)),
      "GPU attention workspace");
  // The split merge counters at its start must be zero before the first launch.
  check(cuda_status(cudaMemset(workspace.data(), 0, workspace.bytes())), "GPU attention workspace");
  if (has_newest_blocks_group()) {
    const int64_t lse_floats = cuda::prefill_int4_workspace_floats(
        options.max_num_tokens, static_cast<int32_t>(config.num_attention_heads));
    lse_workspace = device_bytes(lse_floats * 4, "GPU attention workspace");
  }
  auto upload_table = [&](const RopeConfig& rope, cuda::DeviceBuffer& out) {
    const std::vector<float> freqs = rope_inv_freq(rope, config.head_dim);
    out = device_bytes(static_cast<int64_t>(freqs.size() * 4), "RoPE table");
    check(cuda_status(cudaMemcpy(out.data(), freqs.data(), freqs.size() * 4,
                                 cudaMemcpyHostToDevice)),
          "RoPE table");
  };
  upload_table(config.rope, inv_freq);
  if (config.sliding_rope) upload_table(*config.sliding_rope, sliding_inv_freq);
  if (config.sandwich_norms) branch = device_bytes(t * h * 4, "GPU activations");
  int64_t bytes = allocate_moe_scratch() + allocate_mla_scratch();
  for (const cuda::DeviceBuffer* b :
       {&residual, &normed, &qkv, &attn, &gate_up, &act, &logits, &workspace, &lse_workspace,
        &inv_freq, &sliding_inv_freq, &branch, &sampled_tokens, &sampled_logprobs}) {
    bytes += static_cast<int64_t>(b->bytes());
  }
  if (options.weight_dtype == DType::kF8E4M3) {
    // The activations' FP8 codes and, for products cuBLASLt cannot scale itself, their fp32
    // product, at their largest now: graphs keep the scratch's address.
    const int64_t qkv_n = q_width() + 2 * config.num_key_value_heads * config.head_dim;
    const Result<int64_t> fp8 = gemm.reserve_fp8(t, std::max({h, q_width(), inter}),
                                                 std::max({h, qkv_n, 2 * inter}), stream.get());
    check(fp8.ok() ? Status::Ok() : fp8.status(), "FP8 activation scratch");
    bytes += *fp8;
  }
  info.scratch_bytes = bytes + inputs.device_bytes();
}

void CudaModel::Impl::allocate_newest_pool() {
  const int32_t n = options.num_newest_blocks;
  newest_layout.emplace(kv::newest_blocks_spec(layout.spec(), DType::kBF16), options.block_size);
  newest_pool = device_bytes(newest_layout->pool_bytes(n), "KV newest-blocks pool");
  check(cuda_status(cudaMemset(newest_pool.data(), 0, newest_pool.bytes())),
        "KV newest-blocks pool");
  info.num_newest_blocks = n;
  info.newest_pool_bytes = newest_layout->pool_bytes(n);
  newest_mover =
      std::make_unique<CudaBlockMover>(newest_pool.data(), n, newest_layout->block_bytes());
}

void CudaModel::Impl::allocate_pool() {
  // The newest-blocks pool's bytes come out of the KV budget, as the CPU engine's do (engine.cc):
  // an explicit budget loses them below, a measured one already counts them as used.
  if (has_newest_blocks_group() && !newest_layout) allocate_newest_pool();
  size_t free_bytes = 0, total_bytes = 0;
  check(cuda_status(cudaMemGetInfo(&free_bytes, &total_bytes)), "cudaMemGetInfo");
  info.gpu_total_bytes = static_cast<int64_t>(total_bytes);
  int64_t num_blocks = options.num_blocks;
  if (num_blocks <= 0) {
    int64_t budget = options.kv_cache_memory_bytes;
    if (budget > 0 && info.newest_pool_bytes >= budget) {
      throw Error("the KV cache memory (" + std::to_string(budget) +
                  " bytes) does not exceed the int4 newest-blocks pool's " +
                  std::to_string(info.newest_pool_bytes) +
                  " bytes (lower --max-num-seqs, --max-num-batched-tokens or --kv-int4-residual)");
    }
    if (budget > 0) {
      budget -= info.newest_pool_bytes;
    } else {
      const auto used = static_cast<int64_t>(total_bytes - free_bytes);
      budget = static_cast<int64_t>(options.gpu_memory_utilization * static_cast<double>(total_bytes)) -
               used;
    }
    num_blocks = budget / layout.block_bytes();
  }
  if (num_blocks < 2) {
    const std::string newest_mib =
        newest_layout
            ? ", int4 newest-blocks pool " + std::to_string(info.newest_pool_bytes >> 20) + " MiB"
            : "";
    throw Error("no room for the KV cache on the GPU: weights " +
                std::to_string(info.weight_bytes >> 20) + " MiB, activations " +
                std::to_string(info.scratch_bytes >> 20) + " MiB" + newest_mib + " of " +
                std::to_string(total_bytes >> 20) +
                " MiB (raise --gpu-memory-utilization or set --kv-cache-memory-bytes)");
  }
  num_blocks = std::min<int64_t>(num_blocks, int64_t{1} << 30);
  pool = device_bytes(layout.pool_bytes(static_cast<int32_t>(num_blocks)), "KV pool");
  check(cuda_status(cudaMemset(pool.data(), 0, pool.bytes())), "KV pool");
  info.num_blocks = static_cast<int32_t>(num_blocks);
  info.kv_pool_bytes = static_cast<int64_t>(pool.bytes());
  mover = std::make_unique<CudaBlockMover>(pool.data(), info.num_blocks, layout.block_bytes());
}

Status CudaModel::Impl::head(const CudaStepInputs::Device& in, std::span<float> host_logits) {
  const int32_t num_rows = in.num_logits_rows + in.num_sample_rows;
  const int64_t vocab = config.vocab_size;
  for (int32_t r0 = 0; r0 < num_rows; r0 += kLogitsChunk) {
    const int32_t n = std::min(kLogitsChunk, num_rows - r0);
    STRATA_RETURN_IF_ERROR(norm(weights.final_norm, in.logits_rows + r0, n));
    cuda::GemmParams p;
    p.a = normed.data();
    p.lda = config.hidden_size;
    p.w = weights.lm_head_data();
    p.ldw = config.hidden_size;
    p.d = logits.data();
    p.ldd = vocab;
    p.d_dtype = DType::kF32;
    p.m = n;
    p.n = vocab;
    p.k = config.hidden_size;
    STRATA_RETURN_IF_ERROR(gemm.run(p, stream.get()));
    if (config.final_logit_softcapping > 0.0) {  // Gemma's cap, before any copy or draw
      STRATA_RETURN_IF_ERROR(cuda::logit_softcap(logits.as<float>(), int64_t{n} * vocab,
                                                 static_cast<float>(config.final_logit_softcapping),
                                                 stream.get()));
    }
    // Rows [r0, r0 + n): logits rows first, then sample rows.
    const int32_t copy_end = std::min(r0 + n, in.num_logits_rows);
    if (copy_end > r0) {
      STRATA_CUDA_CHECK(cudaMemcpyAsync(host_logits.data() + static_cast<int64_t>(r0) * vocab,
                                        logits.data(),
                                        static_cast<size_t>((copy_end - r0) * vocab) * 4,
                                        cudaMemcpyDeviceToHost, stream.get()));
    }
    const int32_t sample_begin = std::max(r0, in.num_logits_rows);
    if (r0 + n > sample_begin) {
      STRATA_RETURN_IF_ERROR(sample_rows(in, sample_begin - in.num_logits_rows,
                                         r0 + n - sample_begin,
                                         logits.as<float>() + (sample_begin - r0) * vocab));
    }
  }
  return Status::Ok();
}

Status CudaModel::Impl::collect_samples(std::span<SampledToken> sampled) {
  const size_t n = sampled.size();
  if (n > static_cast<size_t>(options.max_num_tokens)) {
    return Status::Internal("more draws than rows");
  }
  if (n > 0) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host_tokens.get(), sampled_tokens.data(), n * 4,
                                      cudaMemcpyDeviceToHost, stream.get()));
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host_logprobs.get(), sampled_logprobs.data(), n * 4,
                                      cudaMemcpyDeviceToHost, stream.get()));
  }
  STRATA_RETURN_IF_ERROR(stream.synchronize());
  for (size_t i = 0; i < n; ++i) {
    if (host_tokens[i] < 0) {
      return Status::Internal("GPU sampling: a row has no finite logit (a broken forward pass)");
    }
    sampled[i] = SampledToken{host_tokens[i], host_logprobs[i]};
  }
  return Status::Ok();
}

Status CudaModel::Impl::run_body(const CudaStepInputs::Device& in, std::span<float> host_logits) {
  cuda::EmbeddingParams embed;
  embed.token_ids = in.token_ids;
  embed.table = weights.embed.data();
  embed.table_dtype = DType::kBF16;
  embed.out = residual.as<float>();
  embed.num_tokens = in.num_tokens;
  embed.hidden = static_cast<int32_t>(config.hidden_size);
  embed.scale = embed_scale;
  STRATA_RETURN_IF_ERROR(cuda::embedding(embed, stream.get()));
  for (int32_t l = 0; l < static_cast<int32_t>(config.num_hidden_layers); ++l) {
    STRATA_RETURN_IF_ERROR(run_layer(l, in));
  }
  return head(in, host_logits);
}

Status CudaModel::Impl::run_graph(const ForwardBatch& batch, std::span<SampledToken> sampled) {
  const int32_t n = batch.layout.num_seqs;
  const int32_t padded = std::min(graph_batch_size(n), options.max_num_seqs);
  int32_t kv_bound = kMinGraphKvBound;
  for (int32_t s = 0; s < n; ++s) {
    while (kv_bound < batch.layout.kv_len(s)) kv_bound *= 2;
  }
  Result<CudaStepInputs::Device> uploaded =
      graph_inputs.upload_fixed(batch, padded, kv_bound, stream.get());
  if (!uploaded.ok()) return uploaded.status();
  start_masks(batch, graph_inputs);
  // A step with masked rows replays a graph of its own, with the masking launch in it.
  const GraphKey key{padded, kv_bound, uploaded->mask_row != nullptr};
  auto it = graphs.find(key);
  if (it != graphs.end()) {
    STRATA_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream.get()));
  } else {
    // The first step of a shape runs eagerly (its results are this step's, and it settles the
    // GEMM plans), then the same launches are captured for the next steps of that shape.
    STRATA_RETURN_IF_ERROR(run_body(*uploaded, {}));
    STRATA_RETURN_IF_ERROR(capture(key, *uploaded));
  }
  return collect_samples(sampled.first(static_cast<size_t>(n)));
}

Status CudaModel::Impl::capture(GraphKey key, const CudaStepInputs::Device& in) {
  STRATA_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  const Status body = run_body(in, {});
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream.get(), &graph);
  if (!body.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return body;
  }
  STRATA_CUDA_CHECK(end);
  GraphExec exec;
  const cudaError_t inst = cudaGraphInstantiate(&exec.exec, graph, 0);
  cudaGraphDestroy(graph);
  STRATA_CUDA_CHECK(inst);
  graphs.emplace(key, std::move(exec));
  return Status::Ok();
}

Status CudaModel::Impl::sample_rows(const CudaStepInputs::Device& in, int32_t first, int32_t count,
                                    float* chunk_logits) {
  if (in.mask_row != nullptr) {  // structured outputs: their rows' disallowed logits to -inf
    // Once mask_thread has made the masks (MaskThread): the pass up to here ran meanwhile.
    STRATA_RETURN_IF_ERROR(cuda::wait_host_signal(mask_signal.get(), stream.get()));
    cuda::TokenMaskParams m;
    m.logits = chunk_logits;
    m.num_rows = count;
    m.vocab = static_cast<int32_t>(config.vocab_size);
    m.mask_row = in.mask_row + first;
    m.masks = in.masks;
    m.mask_words = in.mask_words;
    STRATA_RETURN_IF_ERROR(cuda::apply_token_masks(m, stream.get()));
  }
  cuda::SampleParams p;
  p.logits = chunk_logits;
  p.num_rows = count;
  p.vocab = static_cast<int32_t>(config.vocab_size);
  p.temperature = in.temperature + first;
  p.top_k = in.top_k + first;
  p.top_p = in.top_p + first;
  p.min_p = in.min_p + first;
  p.seeds = in.seeds + first;
  p.out_tokens = sampled_tokens.as<int32_t>() + first;
  p.out_logprobs = sampled_logprobs.as<float>() + first;
  return cuda::sample(p, stream.get());
}

Status CudaModel::Impl::gemm_run(const void* a, int64_t lda, const DeviceTensor& w,
                                 const DeviceTensor& w_scale, const DeviceTensor& bias, void* d,
                                 int64_t ldd, DType d_dtype, bool accumulate, int64_t m, int64_t n,
                                 int64_t k) {
  cuda::GemmParams p;
  p.a = a;
  p.lda = lda;
  p.w = w.data();
  p.ldw = k;
  p.w_dtype = w.dtype;
  p.w_scale = w_scale.empty() ? nullptr : static_cast<const float*>(w_scale.data());
  p.bias = bias.empty() ? nullptr : bias.data();
  p.d = d;
  p.ldd = ldd;
  p.d_dtype = d_dtype;
  p.accumulate = accumulate;
  p.m = m;
  p.n = n;
  p.k = k;
  return gemm.run(p, stream.get());
}

Status CudaModel::Impl::norm(const DeviceTensor& weight, const int32_t* rows, int32_t num_rows) {
  cuda::RmsNormParams p;
  p.residual = residual.as<float>();
  p.weight = weight.data();
  p.weight_dtype = weight.dtype;
  p.rows = rows;
  p.out = normed.data();
  p.num_rows = num_rows;
  p.hidden = static_cast<int32_t>(config.hidden_size);
  p.eps = static_cast<float>(config.rms_norm_eps);
  return cuda::rms_norm(p, stream.get());
}

Status CudaModel::Impl::sandwich_add_norm(const DeviceTensor& branch_weight,
                                          const DeviceTensor& weight, int32_t num_rows) {
  cuda::RmsNormParams p;
  p.residual = residual.as<float>();
  p.delta = branch.as<float>();
  p.delta_weight = static_cast<const float*>(branch_weight.data());
  p.weight = weight.data();
  p.weight_dtype = weight.dtype;
  p.out = normed.data();
  p.num_rows = num_rows;
  p.hidden = static_cast<int32_t>(config.hidden_size);
  p.eps = static_cast<float>(config.rms_norm_eps);
  return cuda::rms_norm(p, stream.get());
}

float CudaModel::Impl::attention_scale() const {
  // Gemma 3: 1 / sqrt(query_pre_attn_scalar), as the CPU engine (Model::run_attention).
  return config.query_pre_attn_scalar > 0.0
             ? static_cast<float>(1.0 / std::sqrt(config.query_pre_attn_scalar))
             : 1.0f / std::sqrt(static_cast<float>(config.head_dim));
}

Status CudaModel::Impl::run_attention(int32_t l, const CudaStepInputs::Device& in) {
  const PagedKvCacheView cache = layout.layer_view(pool.data(), l);
  // INT4: the newest blocks are read from the newest-blocks group's pool (in.newest_layout says
  // which).
  const bool int4 = cache.dtype == cuda::kInt4KvDType;
  const NewestBlocksView newest =
      int4 ? NewestBlocksView{.cache = newest_layout->layer_view(newest_pool.data(), l),
                              .layout = in.newest_layout,
                              .blocks = in.newest_blocks}
           : NewestBlocksView{};
  auto* qkv_base = qkv.as<uint16_t>();
  const int32_t window = config.layer_sliding_window[static_cast<size_t>(l)];
  const float scale = attention_scale();
  // The leading one-token sequences (decode rows, also in a step that carries prompt chunks) go
  // through the decode kernel, which streams each sequence's K/V split across the GPU; the
  // prefill kernel would give each of them a 16-row query tile and one block per KV head.
  const int32_t d = in.num_decode_seqs;
  const int32_t n = in.layout.num_seqs;
  if (d > 0) {
    cuda::DecodeAttentionParams p;
    p.q = qkv_base;
    p.q_seq_stride = qkv_width();
    p.o = attn.data();
    p.o_seq_stride = q_width();
    p.layout = in.layout;
    p.layout.num_seqs = d;
    p.cache = cache;
    p.newest = newest;
    if (int4) p.newest.layout.num_seqs = d;
    p.num_qo_heads = static_cast<int32_t>(config.num_attention_heads);
    p.sm_scale = scale;
    p.window_left = window > 0 ? window - 1 : -1;
    p.max_kv_len = in.max_kv_len;
    p.workspace = workspace.data();
    p.workspace_bytes = workspace.bytes();
    STRATA_RETURN_IF_ERROR(cuda::decode_attention(p, stream.get()));
  }
  if (d == n) return Status::Ok();
  // The other sequences: their arrays from entry d on (the indptr arrays hold absolute offsets,
  // so the query rows and block ids are found as they are).
  cuda::PrefillAttentionParams p;
  p.q = qkv_base;
  p.q_token_stride = qkv_width();
  p.o = attn.data();
  p.o_token_stride = q_width();
  p.qo_indptr = in.q_indptr + d;
  p.layout = in.layout;
  p.layout.num_seqs = n - d;
  p.layout.kv_indptr += d;
  p.layout.kv_last_page_len += d;
  p.cache = cache;
  p.newest = newest;
  if (int4) {
    p.newest.layout.num_seqs = n - d;
    p.newest.layout.kv_indptr += d;
    p.newest.layout.kv_last_page_len += d;
    p.newest.layout.first_block += d;
  }
  p.lse_workspace = int4 ? lse_workspace.as<float>() : nullptr;
  p.num_qo_heads = static_cast<int32_t>(config.num_attention_heads);
  p.sm_scale = scale;
  p.window_left = window > 0 ? window - 1 : -1;
  p.max_q_len = in.max_q_len;
  return cuda::prefill_attention(p, stream.get());
}

Status CudaModel::Impl::rope_and_append(int32_t l, const CudaLayerWeights& w,
                                        const CudaStepInputs::Device& in) {
  cuda::QkNormRopeParams rope;
  rope.qkv = qkv.data();
  rope.token_stride = qkv_width();
  rope.positions = in.positions;
  const bool sliding = sliding_rope_layer(l);
  rope.inv_freq = sliding ? sliding_inv_freq.as<float>() : inv_freq.as<float>();
  rope.q_norm = w.q_norm.empty() ? nullptr : w.q_norm.data();
  rope.k_norm = w.k_norm.empty() ? nullptr : w.k_norm.data();
  rope.norm_dtype = w.q_norm.empty() ? DType::kBF16 : w.q_norm.dtype;
  rope.eps = static_cast<float>(config.rms_norm_eps);
  rope.attention_scaling = static_cast<float>(
      rope_attention_factor(sliding ? *config.sliding_rope : config.rope));  // YaRN's
  rope.num_tokens = in.num_tokens;
  rope.num_q_heads = static_cast<int32_t>(config.num_attention_heads);
  rope.num_kv_heads = static_cast<int32_t>(config.num_key_value_heads);
  rope.head_dim = static_cast<int32_t>(config.head_dim);
  // The step's K/V go into the pool in the same launch (kv_append's bytes). An INT4 layer's go
  // to the newest-blocks group's pool in bf16 at their slots there; the blocks they fill are
  // then quantized from there into the int4 pool, before attention reads either.
  const PagedKvCacheView cache = layout.layer_view(pool.data(), l);
  const bool int4 = cache.dtype == cuda::kInt4KvDType;
  rope.slot_mapping = int4 ? in.newest_slot_mapping : in.slot_mapping;
  rope.cache = int4 ? newest_layout->layer_view(newest_pool.data(), l) : cache;
  STRATA_RETURN_IF_ERROR(cuda::qk_norm_rope(rope, stream.get()));
  if (!int4) return Status::Ok();
  cuda::KvInt4QuantizeParams quantize;
  quantize.cache = cache;
  quantize.newest = rope.cache;
  quantize.slot_mapping = in.slot_mapping;
  quantize.newest_slot_mapping = in.newest_slot_mapping;
  quantize.num_tokens = in.num_tokens;
  return cuda::kv_int4_quantize_filled(quantize, stream.get());
}

Status CudaModel::Impl::make_graph_inputs(int32_t newest_blocks) {
  graph_inputs = CudaStepInputs{};
  if (options.enforce_eager) return Status::Ok();
  const int64_t max_len =
      options.max_model_len > 0 ? options.max_model_len : config.max_position_embeddings;
  const auto blocks_per_seq = static_cast<int32_t>(max_len / options.block_size + 1);
  Result<CudaStepInputs> fixed =
      CudaStepInputs::create_fixed(options.max_num_seqs, blocks_per_seq,
                                   static_cast<int32_t>(config.vocab_size), newest_blocks);
  if (!fixed.ok()) return fixed.status();
  graph_inputs = std::move(fixed).value();
  return Status::Ok();
}

Status CudaModel::Impl::capture_attention(int32_t l, const CudaStepInputs::Device& in) {
  std::vector<uint16_t>* out = attention_capture->out[static_cast<size_t>(l)];
  if (out == nullptr) return Status::Ok();
  const auto row0 = static_cast<size_t>(attention_capture->row0);
  const auto width = static_cast<size_t>(q_width());
  out->resize((row0 + static_cast<size_t>(in.num_tokens)) * width);
  // To pageable memory: returns once the copy is done.
  STRATA_CUDA_CHECK(cudaMemcpyAsync(out->data() + row0 * width, attn.data(),
                                    static_cast<size_t>(in.num_tokens) * width * 2,
                                    cudaMemcpyDeviceToHost, stream.get()));
  return Status::Ok();
}

// Llama-family layer (docs/gpu-engine.md): the o_proj and down_proj products accumulate into the
// fp32 residual, and each norm reads it. Gemma 3 (sandwich norms): the two products go to
// `branch` instead, and one rms_norm launch norms the branch by its output norm, adds it to the
// residual and norms the sum by the next norm (the MLP's input norm, then the next layer's input
// norm or, after the last layer, the final norm, whose output head() makes again for the rows it
// wants); so layer l > 0 finds its input norm already in `normed`.
Status CudaModel::Impl::run_layer(int32_t l, const CudaStepInputs::Device& in) {
  const CudaLayerWeights& w = weights.layers[static_cast<size_t>(l)];
  const int64_t t = in.num_tokens;
  const int64_t h = config.hidden_size;
  const bool sandwich = config.sandwich_norms;
  if (!sandwich || l == 0) STRATA_RETURN_IF_ERROR(norm(w.input_norm, nullptr, in.num_tokens));
  if (config.mla.enabled()) {
    STRATA_RETURN_IF_ERROR(run_mla_attention(l, in));
  } else {
    STRATA_RETURN_IF_ERROR(gemm_run(normed.data(), h, w.qkv, w.qkv_scale, w.qkv_bias, qkv.data(),
                                    qkv_width(), DType::kBF16, false, t, qkv_width(), h));
    STRATA_RETURN_IF_ERROR(rope_and_append(l, w, in));
    STRATA_RETURN_IF_ERROR(run_attention(l, in));
  }
  if (attention_capture != nullptr) STRATA_RETURN_IF_ERROR(capture_attention(l, in));
  if (!sandwich) {
    STRATA_RETURN_IF_ERROR(gemm_run(attn.data(), q_width(), w.o_proj, w.o_scale, w.o_bias,
                                    residual.data(), h, DType::kF32, true, t, h, q_width()));
    STRATA_RETURN_IF_ERROR(norm(w.post_attention_norm, nullptr, in.num_tokens));
    return run_mlp(w, t, residual.as<float>(), true);
  }
  STRATA_RETURN_IF_ERROR(gemm_run(attn.data(), q_width(), w.o_proj, w.o_scale, w.o_bias,
                                  branch.data(), h, DType::kF32, false, t, h, q_width()));
  STRATA_RETURN_IF_ERROR(sandwich_add_norm(w.attn_output_norm, w.post_attention_norm, in.num_tokens));
  STRATA_RETURN_IF_ERROR(run_mlp(w, t, branch.as<float>(), false));
  const bool last = l + 1 == static_cast<int32_t>(config.num_hidden_layers);
  const DeviceTensor& next_norm =
      last ? weights.final_norm : weights.layers[static_cast<size_t>(l) + 1].input_norm;
  return sandwich_add_norm(w.mlp_output_norm, next_norm, in.num_tokens);
}

Status CudaModel::Impl::run_mlp(const CudaLayerWeights& w, int64_t t, float* d, bool accumulate) {
  if (w.is_moe()) return run_moe(w, t, d, accumulate);
  return run_dense_mlp(w, t, d, accumulate);
}

Status CudaModel::Impl::run_dense_mlp(const CudaLayerWeights& w, int64_t t, float* d,
                                      bool accumulate) {
  const int64_t h = config.hidden_size;
  // The dense MLP's width, or an MoE layer's shared experts' (its down_proj is [hidden, width]).
  const int64_t inter = w.down_proj.numel / h;
  // act = silu_and_mul(gate | up): formed in the GEMV's epilogue where it takes the product (few
  // rows), else through the gate_up buffer and silu_and_mul. Gemm chooses by shape (gemm.h).
  // GeGLU (Gemma 3): gate | up into the gate_up buffer, then gelu_tanh_and_mul.
  const bool gelu = config.mlp_activation == MlpActivation::kGeluTanh;
  cuda::GemmParams mlp;
  mlp.a = normed.data();
  mlp.lda = h;
  mlp.w = w.gate_up.data();
  mlp.ldw = h;
  mlp.w_dtype = w.gate_up.dtype;
  mlp.w_scale =
      w.gate_up_scale.empty() ? nullptr : static_cast<const float*>(w.gate_up_scale.data());
  mlp.bias = w.gate_up_bias.empty() ? nullptr : w.gate_up_bias.data();
  mlp.d = gelu ? gate_up.data() : act.data();
  mlp.ldd = gelu ? 2 * inter : inter;
  mlp.m = t;
  mlp.n = 2 * inter;
  mlp.k = h;
  mlp.epilogue = gelu ? cuda::GemmEpilogue::kNone : cuda::GemmEpilogue::kSiluAndMul;
  mlp.product_scratch = gelu ? nullptr : gate_up.data();
  STRATA_RETURN_IF_ERROR(gemm.run(mlp, stream.get()));
  if (gelu) {
    cuda::SiluAndMulParams g;
    g.gate_up = gate_up.data();
    g.out = act.data();
    g.num_tokens = static_cast<int32_t>(t);
    g.intermediate = static_cast<int32_t>(inter);
    STRATA_RETURN_IF_ERROR(cuda::gelu_tanh_and_mul(g, stream.get()));
  }
  return gemm_run(act.data(), inter, w.down_proj, w.down_scale, w.down_bias, d, h, DType::kF32,
                  accumulate, t, h, inter);
}

// The MoE layer (kernels/cuda/moe.h), as moe_block.cc runs it on the CPU: router logits in fp32
// from the normed bf16 rows, each token's top-k (renormalized when the config says), then the
// experts' grouped GEMMs and the weighted combine straight into d (the fp32 residual, or Gemma's
// branch). Every size the launches take is the step's token count: the routing stays on the
// device, so a decode step of this layer replays from a graph.
Status CudaModel::Impl::run_moe(const CudaLayerWeights& w, int64_t t, float* d, bool accumulate) {
  const MoeConfig& m = config.moe;
  const int64_t h = config.hidden_size;
  const auto num_experts = static_cast<int32_t>(m.num_experts);
  const auto top_k = static_cast<int32_t>(m.num_experts_per_tok);
  const DeviceTensor none;
  STRATA_RETURN_IF_ERROR(gemm_run(normed.data(), h, w.router, none, none, moe_logits.data(),
                                  num_experts, DType::kF32, false, t, num_experts, h));
  cuda::MoeRouteParams r;
  r.logits = moe_logits.data();
  r.logits_dtype = DType::kF32;
  r.score_bias = w.score_bias.empty() ? nullptr : static_cast<const float*>(w.score_bias.data());
  r.experts = moe_experts.as<int32_t>();
  r.weights = moe_weights.as<float>();
  r.num_tokens = static_cast<int32_t>(t);
  r.num_experts = num_experts;
  r.top_k = top_k;
  r.scoring =
      m.scoring == MoeScoring::kSigmoid ? cuda::MoeScoring::kSigmoid : cuda::MoeScoring::kSoftmax;
  switch (m.topk_method) {
    case MoeTopkMethod::kGreedy:
      r.topk_method = cuda::MoeTopk::kGreedy;
      break;
    case MoeTopkMethod::kGroupLimitedGreedy:
      r.topk_method = cuda::MoeTopk::kGroupLimitedGreedy;
      break;
    case MoeTopkMethod::kNoAuxTc:
      r.topk_method = cuda::MoeTopk::kNoAuxTc;
      break;
  }
  r.num_groups = static_cast<int32_t>(m.num_groups);
  r.topk_groups = static_cast<int32_t>(m.topk_groups);
  r.norm_topk_prob = m.norm_topk_prob;
  r.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  STRATA_RETURN_IF_ERROR(cuda::moe_route(r, stream.get()));
  cuda::MoeExpertsParams p;
  p.x = normed.data();
  p.experts = moe_experts.as<int32_t>();
  p.weights = moe_weights.as<float>();
  p.w_gate_up = w.experts_gate_up.data();
  p.w_down = w.experts_down.data();
  p.out = d;
  p.out_dtype = DType::kF32;
  p.accumulate = accumulate;
  p.y_dtype = DType::kF32;
  p.num_tokens = static_cast<int32_t>(t);
  p.top_k = top_k;
  p.num_experts = num_experts;
  p.hidden = static_cast<int32_t>(h);
  p.inter = static_cast<int32_t>(m.moe_intermediate_size);
  STRATA_RETURN_IF_ERROR(cuda::moe_experts_forward(
      p, moe_workspace.data(), static_cast<int64_t>(moe_workspace.bytes()), stream.get()));
  // DeepSeek's shared experts: every token's dense MLP, added to the routed sum.
  if (!w.gate_up.empty()) return run_dense_mlp(w, t, d, true);
  return Status::Ok();
}

int64_t CudaModel::Impl::allocate_moe_scratch() {
  const MoeConfig& m = config.moe;
  if (!m.any_moe_layer()) return 0;
  const int64_t t = options.max_num_tokens;
  const int64_t k = m.num_experts_per_tok;
  moe_logits = device_bytes(t * m.num_experts * 4, "GPU MoE scratch");
  moe_experts = device_bytes(t * k * 4, "GPU MoE scratch");
  moe_weights = device_bytes(t * k * 4, "GPU MoE scratch");
  moe_workspace = device_bytes(
      cuda::moe_workspace_bytes(t, static_cast<int32_t>(k), static_cast<int32_t>(m.num_experts),
                                static_cast<int32_t>(config.hidden_size),
                                static_cast<int32_t>(m.moe_intermediate_size)),
      "GPU MoE workspace");
  int64_t bytes = 0;
  for (const cuda::DeviceBuffer* b : {&moe_logits, &moe_experts, &moe_weights, &moe_workspace}) {
    bytes += static_cast<int64_t>(b->bytes());
  }
  return bytes;
}

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

const ModelConfig& CudaModel::config() const { return impl_->config; }
const kv::KvLayout& CudaModel::kv_layout(int32_t pool) const {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  return pool == 0 ? impl_->layout : *impl_->newest_layout;
}
const CudaModelInfo& CudaModel::info() const { return impl_->info; }
kv::BlockMover& CudaModel::block_mover(int32_t pool) {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  return pool == 0 ? *impl_->mover : *impl_->newest_mover;
}

std::unique_ptr<kv::BlockMover> CudaModel::new_block_mover(int32_t pool) {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  const Impl& m = *impl_;
  return pool == 0 ? std::make_unique<CudaBlockMover>(m.pool.data(), m.info.num_blocks,
                                                      m.layout.block_bytes())
                   : std::make_unique<CudaBlockMover>(m.newest_pool.data(), m.info.num_newest_blocks,
                                                      m.newest_layout->block_bytes());
}

bool CudaModel::device_available() {
  int num_devices = 0;
  return cudaGetDeviceCount(&num_devices) == cudaSuccess && num_devices > 0;
}

std::unique_ptr<CudaModel> CudaModel::create(const CudaModelOptions& options) {
  ModelConfig config = load_model_config(options.model_dir);
  if (options.load_format == LoadFormat::kDummy) return create(std::move(config), nullptr, options);
  const WeightStore weights = WeightStore::open(options.model_dir);
  return create(std::move(config), &weights, options);
}

std::unique_ptr<CudaModel> CudaModel::create(ModelConfig config, const WeightStore* weights,
                                             const CudaModelOptions& options) {
  if (!device_available()) throw Error("--device cuda: no CUDA device is available");
  STRATA_CHECK((weights == nullptr) == (options.load_format == LoadFormat::kDummy),
               "CudaModel::create: checkpoint weights exactly when not dummy");
  // Before the head-dim checks: an MLA model's head_dim is its RoPE width, which its own rule
  // names.
  check_mla_shapes(config, options);
  // INT4 reads like the quantized dtypes (bf16 queries, their head dims) plus the newest-blocks
  // group's pool.
  const bool quantized =
      cuda::is_quantized_kv(options.kv_dtype) || options.kv_dtype == cuda::kInt4KvDType;
  if (options.kv_dtype != DType::kBF16 && !quantized) {
    throw Error("the GPU engine keeps its activations in bf16; KV dtype " +
                std::string(dtype_name(options.kv_dtype)) +
                " is not supported on --device cuda (use bfloat16, fp8_e4m3, fp8_e5m2, int8 or "
                "int4)");
  }
  if (const Status s = check_layer_dtypes(config, options.kv_dtype, options.kv_layer_dtypes);
      !s.ok()) {
    throw Error("--device cuda: " + s.message());
  }
  const auto head_dim = static_cast<int32_t>(config.head_dim);
  if (!cuda::contains(cuda::kAttentionHeadDims, head_dim) ||
      !cuda::contains(cuda::kPrefillHeadDims, head_dim)) {
    throw Error("--device cuda: head_dim " + std::to_string(config.head_dim) +
                " has no CUDA attention kernel (supported: 64, 128, 256)");
  }
  if (quantized && !cuda::contains(cuda::kQuantizedKvHeadDims, head_dim)) {
    throw Error("--device cuda: KV cache dtype " + std::string(dtype_name(options.kv_dtype)) +
                " has no CUDA attention kernel at head_dim " + std::to_string(head_dim) +
                " (quantized KV caches: head_dim 64 or 128); use --kv-cache-dtype bfloat16");
  }
  check_moe_shapes(config);
  if (!cuda::contains(cuda::kKvBlockSizes, options.block_size)) {
    throw Error("--device cuda: block size " + std::to_string(options.block_size) +
                " is not one of 8, 16, 32, 64, 128");
  }
  const bool int4 = kv::needs_newest_blocks_group(pool_spec(config, options));
  if (int4 && (options.num_newest_blocks < 2 || options.newest_blocks < 1)) {
    throw Error(
        "--device cuda: an int4 KV cache needs a newest-blocks pool of at least 2 "
        "blocks (" +
        std::to_string(options.num_newest_blocks) +
        ") and a full-precision window of at least 1 block (" +
        std::to_string(options.newest_blocks) + ")");
  }
  if (!int4 && options.num_newest_blocks != 0) {
    throw Error("--device cuda: a newest-blocks pool is for a KV cache with an int4 layer only");
  }
  cuda::Stream stream = take(cuda::Stream::create(), "CUDA stream");
  cuda::Gemm gemm = take(cuda::Gemm::create(), "cuBLASLt");
  if (options.weight_dtype != DType::kBF16 && options.weight_dtype != DType::kF8E4M3) {
    throw Error("--device cuda: weight dtype " + std::string(dtype_name(options.weight_dtype)) +
                " is not supported (bfloat16, or fp8 through --quantization fp8)");
  }
  CudaDecoderWeights device_weights =
      weights == nullptr
          ? take(dummy_weights(config, options.dummy_seed), "dummy weights on the GPU")
          : take(upload_weights(config, *weights), "weights to the GPU");
  if (options.weight_dtype == DType::kF8E4M3) {
    check(quantize_weights_fp8(device_weights), "FP8 weights on the GPU");
  }
  const int64_t weight_bytes = device_weights.bytes();
  const float embed_scale = gpu_embedding_scale(config, device_weights.embed_source_dtype);
  auto impl = std::make_unique<Impl>(std::move(config), options, std::move(device_weights),
                                     std::move(stream), std::move(gemm));
  impl->info.weight_bytes = weight_bytes;
  impl->embed_scale = embed_scale;
  impl->inputs = take(CudaStepInputs::create(options.max_num_tokens, options.max_num_seqs,
                                              static_cast<int32_t>(impl->config.vocab_size)),
                      "GPU step inputs");
  check(impl->make_graph_inputs(int4 ? options.newest_blocks : 0), "GPU graph inputs");
  impl->allocate_scratch();
  impl->allocate_pool();
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

Status CudaModel::forward(const ForwardBatch& batch, std::span<float> logits,
                          std::span<SampledToken> sampled) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  STRATA_RETURN_IF_ERROR(validate_step_batch(batch, c.vocab_size, m.info.num_blocks,
                                             m.options.max_num_tokens, m.options.max_num_seqs,
                                             logits.size(), sampled.size()));
  // The GPU runner's KV cache groups: group 0, and for INT4 the newest-blocks group.
  const int32_t newest = batch.newest_group();
  if (m.newest_layout) {
    if (newest < 1) {
      return Status::InvalidArgument(
          "forward: a batch over an int4 KV cache needs the newest-blocks group's view");
    }
    STRATA_RETURN_IF_ERROR(validate_step_group(batch, newest, m.info.num_newest_blocks));
  } else if (newest >= 1) {
    return Status::InvalidArgument(
        "forward: a newest-blocks group for a KV pool with no int4 layer");
  }
  STRATA_RETURN_IF_ERROR(m.upload_mla_rows(batch));
  m.stepped = true;
  // Every way out of the step passes the mask signal (a wait kernel launched would spin forever).
  m.mask_thread->arm();
  struct Finish {
    MaskThread& t;
    ~Finish() { t.finish(); }
  } finish{*m.mask_thread};
  if (!m.options.enforce_eager && m.graph_inputs.fits_fixed(batch)) {
    return m.run_graph(batch, sampled);
  }
  Result<CudaStepInputs::Device> uploaded = m.inputs.upload(batch, m.stream.get());
  if (!uploaded.ok()) return uploaded.status();
  m.start_masks(batch, m.inputs);
  STRATA_RETURN_IF_ERROR(m.run_body(*uploaded, logits));
  return m.collect_samples(sampled);
}

void CudaModel::Impl::start_masks(const ForwardBatch& batch, const CudaStepInputs& uploaded_from) {
  const std::span<uint64_t* const> late = uploaded_from.late_masks();
  if (late.empty()) {
    mask_thread->release();
  } else {
    mask_thread->start(batch.fill_masks, late);
  }
}

Status CudaModel::Impl::copy_pool_blocks(void* pool_data, int64_t block_bytes,
                                         std::span<const kv::BlockCopy> copies) {
  if (copies.empty()) return Status::Ok();
  Result<const int32_t*> pairs = inputs.upload_block_pairs(copies, stream.get());
  if (!pairs.ok()) return pairs.status();
  cuda::BlockCopyParams p;
  p.src_pool = pool_data;
  p.dst_pool = pool_data;
  p.block_pairs = *pairs;
  p.num_pairs = static_cast<int32_t>(copies.size());
  p.block_bytes = block_bytes;
  STRATA_RETURN_IF_ERROR(cuda::block_copy(p, stream.get()));
  return stream.synchronize();  // the pinned pairs are reused by the next upload
}

Status CudaModel::scale_fp8_weight_scales(int32_t layer, float factor) {
  Impl& m = *impl_;
  if (layer < 0 || layer >= static_cast<int32_t>(m.weights.layers.size())) {
    return Status::InvalidArgument("scale_fp8_weight_scales: layer out of range");
  }
  CudaLayerWeights& w = m.weights.layers[static_cast<size_t>(layer)];
  if (w.qkv.dtype != DType::kF8E4M3) {
    return Status::InvalidArgument("scale_fp8_weight_scales: the weights are not FP8");
  }
  for (DeviceTensor* t : {&w.qkv_scale, &w.o_scale, &w.gate_up_scale, &w.down_scale}) {
    if (t->empty()) continue;  // an MoE layer's dense MLP (BF16 experts, no shared experts)
    std::vector<float> host(static_cast<size_t>(t->numel));
    STRATA_CUDA_CHECK(cudaMemcpy(host.data(), t->data(), host.size() * 4, cudaMemcpyDeviceToHost));
    for (float& v : host) v *= factor;
    STRATA_CUDA_CHECK(
        cudaMemcpy(t->buffer.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  }
  return Status::Ok();
}

Status CudaModel::copy_blocks(int32_t pool, std::span<const kv::BlockCopy> copies) {
  Impl& m = *impl_;
  if (copies.empty()) return Status::Ok();
  if (pool < 0 || pool >= num_kv_pools()) return Status::InvalidArgument("copies in no KV pool");
  return pool == 0
             ? m.copy_pool_blocks(m.pool.data(), m.layout.block_bytes(), copies)
             : m.copy_pool_blocks(m.newest_pool.data(), m.newest_layout->block_bytes(), copies);
}

}  // namespace strata::model

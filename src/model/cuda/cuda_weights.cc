#include "model/cuda/cuda_weights.h"

#include <cuda_runtime_api.h>

#include <deque>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_view.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/random_fill.h"
#include "model/fp8_block_dequant.h"
#include "model/llama_family.h"
#include "model/mla_gpu.h"

namespace strata::model {
namespace {

Result<DeviceTensor> allocate(DType dtype, int64_t numel) {
  Result<cuda::DeviceBuffer> buffer =
      cuda::DeviceBuffer::allocate(static_cast<size_t>(numel * dtype_size(dtype)));
  if (!buffer.ok()) return buffer.status();
  return DeviceTensor{std::move(buffer).value(), dtype, numel};
}

// Copies `parts` (each [rows_i, cols] of any float dtype) one after another into a new BF16
// tensor: the fused matrices (the MoE experts' too), and plain ones as a single part.
Result<DeviceTensor> upload_bf16(std::span<const TensorView> parts) {
  int64_t numel = 0;
  for (const TensorView& t : parts) numel += t.numel();
  Result<DeviceTensor> out = allocate(DType::kBF16, numel);
  if (!out.ok()) return out.status();
  auto* dst = static_cast<uint16_t*>(out->buffer.data());
  std::vector<uint16_t> staging;
  for (const TensorView& t : parts) {
    const void* src = t.data;
    if (t.dtype != DType::kBF16) {
      staging.resize(static_cast<size_t>(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) {
        staging[static_cast<size_t>(i)] = f32_to_bf16(load_as_f32(t.data, t.dtype, i));
      }
      src = staging.data();
    }
    STRATA_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(t.numel()) * 2, cudaMemcpyHostToDevice));
    dst += t.numel();
  }
  return out;
}
Result<DeviceTensor> upload_bf16(std::initializer_list<TensorView> parts) {
  return upload_bf16(std::span<const TensorView>(parts.begin(), parts.size()));
}

// One tensor as F32 (DeepSeek-V3's router score bias, which moe_route reads in fp32).
Result<DeviceTensor> upload_f32(const TensorView& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    host[static_cast<size_t>(i)] = load_as_f32(t.data, t.dtype, i);
  }
  Result<DeviceTensor> out = allocate(DType::kF32, t.numel());
  if (!out.ok()) return out.status();
  STRATA_CUDA_CHECK(
      cudaMemcpy(out->buffer.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  return out;
}

// Uploads one tensor as stored (norm weights).
Result<DeviceTensor> upload_raw(const TensorView& t) {
  Result<DeviceTensor> out = allocate(t.dtype, t.numel());
  if (!out.ok()) return out.status();
  STRATA_CUDA_CHECK(cudaMemcpy(out->buffer.data(), t.data, static_cast<size_t>(t.nbytes()),
                               cudaMemcpyHostToDevice));
  return out;
}

// A fused bias: empty when the layer has none (biases come all together or not at all).
Result<DeviceTensor> upload_bias(std::initializer_list<TensorView> parts) {
  for (const TensorView& t : parts) {
    if (t.empty()) return DeviceTensor{};
  }
  return upload_bf16(parts);
}

// A norm weight: as stored, or (Gemma 3's (1 + weight) norms) 1 + weight in F32, so the norm
// kernels multiply by it as by any other weight (the CPU engine adds the 1 in fp32 too). Empty
// stays empty.
Result<DeviceTensor> upload_norm(const TensorView& t, bool unit_offset) {
  if (t.empty()) return DeviceTensor{};
  if (!unit_offset) return upload_raw(t);
  std::vector<float> host(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    host[static_cast<size_t>(i)] = 1.0f + load_as_f32(t.data, t.dtype, i);
  }
  Result<DeviceTensor> out = allocate(DType::kF32, t.numel());
  if (!out.ok()) return out.status();
  STRATA_CUDA_CHECK(cudaMemcpy(out->buffer.data(), host.data(), host.size() * 4,
                               cudaMemcpyHostToDevice));
  return out;
}

#define STRATA_ASSIGN_TENSOR(lhs, expr)    \
  do {                                     \
    Result<DeviceTensor> r_ = (expr);      \
    if (!r_.ok()) return r_.status();      \
    (lhs) = std::move(r_).value();         \
  } while (0)

// An MoE layer's router and experts, packed as moe.h's kernels read them (gate | up per expert,
// experts back to back; down likewise), and the shared experts' MLP (DeepSeek) as the dense one.
Status upload_moe(const MoeWeights& m, CudaLayerWeights& out) {
  std::vector<TensorView> gate_up, down;
  gate_up.reserve(2 * m.experts.size());
  down.reserve(m.experts.size());
  for (const ExpertWeights& e : m.experts) {
    gate_up.push_back(e.gate_proj);
    gate_up.push_back(e.up_proj);
    down.push_back(e.down_proj);
  }
  STRATA_ASSIGN_TENSOR(out.router, upload_bf16({m.router}));
  STRATA_ASSIGN_TENSOR(out.experts_gate_up, upload_bf16(gate_up));
  STRATA_ASSIGN_TENSOR(out.experts_down, upload_bf16(down));
  if (!m.score_bias.empty()) STRATA_ASSIGN_TENSOR(out.score_bias, upload_f32(m.score_bias));
  if (!m.shared.gate_proj.empty()) {
    STRATA_ASSIGN_TENSOR(out.gate_up, upload_bf16({m.shared.gate_proj, m.shared.up_proj}));
    STRATA_ASSIGN_TENSOR(out.down_proj, upload_bf16({m.shared.down_proj}));
  }
  return Status::Ok();
}

// W_UK_h^T per head from the layer's kv_b_proj already on the device (read back once at load,
// arranged on the host, uploaded), so checkpoint and dummy weights take the same path.
Status arrange_uk_t(const ModelConfig& c, CudaLayerWeights& out) {
  std::vector<uint16_t> kv_b(static_cast<size_t>(out.kv_b_proj.numel));
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  STRATA_CUDA_CHECK(
      cudaMemcpy(kv_b.data(), out.kv_b_proj.data(), kv_b.size() * 2, cudaMemcpyDeviceToHost));
  const MlaConfig& m = c.mla;
  const std::vector<uint16_t> uk_t = mla_uk_transposed(
      kv_b, c.num_attention_heads, m.qk_nope_head_dim, m.v_head_dim, m.kv_lora_rank);
  STRATA_ASSIGN_TENSOR(out.uk_t, allocate(DType::kBF16, static_cast<int64_t>(uk_t.size())));
  STRATA_CUDA_CHECK(
      cudaMemcpy(out.uk_t.buffer.data(), uk_t.data(), uk_t.size() * 2, cudaMemcpyHostToDevice));
  return Status::Ok();
}

// An MLA layer's attention projections (CudaLayerWeights' MLA fields).
Status upload_mla(const ModelConfig& c, const LayerWeights& w, CudaLayerWeights& out) {
  if (w.q_proj.empty()) {
    STRATA_ASSIGN_TENSOR(out.q_a_proj, upload_bf16({w.q_a_proj}));
    STRATA_ASSIGN_TENSOR(out.q_a_norm, upload_f32(w.q_a_norm));
    STRATA_ASSIGN_TENSOR(out.q_b_proj, upload_bf16({w.q_b_proj}));
  } else {
    STRATA_ASSIGN_TENSOR(out.q_proj, upload_bf16({w.q_proj}));
  }
  STRATA_ASSIGN_TENSOR(out.kv_a_proj, upload_bf16({w.kv_a_proj}));
  STRATA_ASSIGN_TENSOR(out.kv_a_norm, upload_f32(w.kv_a_norm));
  STRATA_ASSIGN_TENSOR(out.kv_b_proj, upload_bf16({w.kv_b_proj}));
  return arrange_uk_t(c, out);
}

Status upload_layer(const ModelConfig& c, const LayerWeights& w, CudaLayerWeights& out) {
  const bool unit_offset = c.norm_unit_offset;
  STRATA_ASSIGN_TENSOR(out.input_norm, upload_norm(w.input_norm, unit_offset));
  STRATA_ASSIGN_TENSOR(out.post_attention_norm, upload_norm(w.post_attention_norm, unit_offset));
  STRATA_ASSIGN_TENSOR(out.attn_output_norm, upload_norm(w.attn_output_norm, unit_offset));
  STRATA_ASSIGN_TENSOR(out.mlp_output_norm, upload_norm(w.mlp_output_norm, unit_offset));
  if (c.mla.enabled()) {
    STRATA_RETURN_IF_ERROR(upload_mla(c, w, out));
  } else {
    STRATA_ASSIGN_TENSOR(out.qkv, upload_bf16({w.q_proj, w.k_proj, w.v_proj}));
    STRATA_ASSIGN_TENSOR(out.qkv_bias, upload_bias({w.q_bias, w.k_bias, w.v_bias}));
  }
  STRATA_ASSIGN_TENSOR(out.q_norm, upload_norm(w.q_norm, unit_offset));
  STRATA_ASSIGN_TENSOR(out.k_norm, upload_norm(w.k_norm, unit_offset));
  STRATA_ASSIGN_TENSOR(out.o_proj, upload_bf16({w.o_proj}));
  STRATA_ASSIGN_TENSOR(out.o_bias, upload_bias({w.o_bias}));
  if (!w.moe.router.empty()) return upload_moe(w.moe, out);
  STRATA_ASSIGN_TENSOR(out.gate_up, upload_bf16({w.gate_proj, w.up_proj}));
  STRATA_ASSIGN_TENSOR(out.gate_up_bias, upload_bias({w.gate_bias, w.up_bias}));
  STRATA_ASSIGN_TENSOR(out.down_proj, upload_bf16({w.down_proj}));
  STRATA_ASSIGN_TENSOR(out.down_bias, upload_bias({w.down_bias}));
  return Status::Ok();
}

// Filled tensors for dummy weights: each gets its own seed so tensors differ.
struct DummyFiller {
  uint64_t seed;
  uint64_t next = 0;

  Result<DeviceTensor> fill(int64_t numel, float lo, float hi) {
    Result<DeviceTensor> out = allocate(DType::kBF16, numel);
    if (!out.ok()) return out.status();
    cuda::RandomFillParams p;
    p.data = out->buffer.data();
    p.dtype = DType::kBF16;
    p.num_elements = numel;
    p.seed = seed * 1000003 + next++;
    p.lo = lo;
    p.hi = hi;
    STRATA_RETURN_IF_ERROR(cuda::random_fill(p, nullptr));
    return out;
  }
  Result<DeviceTensor> matrix(int64_t numel) { return fill(numel, -0.02f, 0.02f); }
  Result<DeviceTensor> fill_f32(int64_t numel, float lo, float hi) {
    Result<DeviceTensor> out = allocate(DType::kF32, numel);
    if (!out.ok()) return out.status();
    cuda::RandomFillParams p;
    p.data = out->buffer.data();
    p.dtype = DType::kF32;
    p.num_elements = numel;
    p.seed = seed * 1000003 + next++;
    p.lo = lo;
    p.hi = hi;
    STRATA_RETURN_IF_ERROR(cuda::random_fill(p, nullptr));
    return out;
  }
  Result<DeviceTensor> norm(int64_t numel) { return fill(numel, 0.9f, 1.1f); }
  // A norm weight the kernels read as F32 (Gemma's, with the 1 of (1 + weight) folded in).
  Result<DeviceTensor> norm_f32(int64_t numel) { return fill_f32(numel, 0.9f, 1.1f); }
};

}  // namespace

int64_t CudaDecoderWeights::bytes() const {
  int64_t total = embed.bytes() + final_norm.bytes() + lm_head.bytes();
  for (const CudaLayerWeights& l : layers) {
    for (const DeviceTensor* t : {&l.input_norm, &l.post_attention_norm, &l.attn_output_norm,
                                  &l.mlp_output_norm, &l.qkv, &l.qkv_bias,
                                  &l.q_norm, &l.k_norm, &l.o_proj, &l.o_bias, &l.gate_up,
                                  &l.gate_up_bias, &l.down_proj, &l.down_bias, &l.qkv_scale,
                                  &l.o_scale, &l.gate_up_scale, &l.down_scale, &l.router,
                                  &l.experts_gate_up, &l.experts_down, &l.score_bias}) {
      total += t->bytes();
    }
    for (const DeviceTensor* t : {&l.q_proj, &l.q_a_proj, &l.q_a_norm, &l.q_b_proj, &l.kv_a_proj,
                                  &l.kv_a_norm, &l.kv_b_proj, &l.uk_t}) {
      total += t->bytes();
    }
  }
  return total;
}

namespace {

// One [rows, cols] bf16 matrix to e4m3 codes (replacing it) and its row scales.
Status quantize_matrix_fp8(DeviceTensor& matrix, DeviceTensor& scales, int64_t cols,
                           const char* name) {
  if (cols <= 0 || cols % 16 != 0 || matrix.numel % cols != 0) {
    throw Error(std::string("--quantization fp8: the ") + name + " matrix's rows have " +
                std::to_string(cols) + " elements, not a multiple of 16");
  }
  const int64_t rows = matrix.numel / cols;
  Result<DeviceTensor> codes = allocate(DType::kF8E4M3, matrix.numel);
  if (!codes.ok()) return codes.status();
  Result<DeviceTensor> s = allocate(DType::kF32, rows);
  if (!s.ok()) return s.status();
  cuda::Fp8QuantizeRowsParams p;
  p.in = matrix.data();
  p.ld_in = cols;
  p.out = codes->buffer.data();
  p.ld_out = cols;
  p.scales = static_cast<float*>(s->buffer.data());
  p.rows = rows;
  p.cols = cols;
  STRATA_RETURN_IF_ERROR(cuda::fp8_quantize_rows(p, nullptr));
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());  // before the bf16 matrix is freed
  matrix = std::move(codes).value();
  scales = std::move(s).value();
  return Status::Ok();
}

}  // namespace

Status quantize_weights_fp8(CudaDecoderWeights& weights) {
  for (CudaLayerWeights& l : weights.layers) {
    if (l.qkv.dtype != DType::kBF16) return Status::InvalidArgument("weights are already quantized");
    // Each matrix's row length: hidden for qkv and gate|up, the attention width for o, the
    // intermediate size for down (numel / output features).
    const int64_t hidden = l.input_norm.numel;
    STRATA_RETURN_IF_ERROR(quantize_matrix_fp8(l.qkv, l.qkv_scale, hidden, "qkv"));
    STRATA_RETURN_IF_ERROR(quantize_matrix_fp8(l.o_proj, l.o_scale, l.o_proj.numel / hidden, "o_proj"));
    // An MoE layer's router and experts stay BF16 (the grouped GEMM reads BF16); its dense MLP
    // is the shared experts' or absent.
    if (l.gate_up.empty()) continue;
    STRATA_RETURN_IF_ERROR(quantize_matrix_fp8(l.gate_up, l.gate_up_scale, hidden, "gate_up"));
    STRATA_RETURN_IF_ERROR(
        quantize_matrix_fp8(l.down_proj, l.down_scale, l.down_proj.numel / hidden, "down_proj"));
  }
  return Status::Ok();
}

Result<CudaDecoderWeights> upload_weights(const ModelConfig& config, const WeightStore& store) {
  DecoderWeights w = bind_llama_family(config, store);
  // Block-scaled FP8 (DeepSeek-V3): dequantized to BF16 on the host first, as the CPU engine does.
  std::deque<std::vector<uint16_t>> dequantized;
  dequantize_block_fp8(config, store, w, dequantized);
  CudaDecoderWeights out;
  out.embed_source_dtype = w.embed.dtype;
  STRATA_ASSIGN_TENSOR(out.embed, upload_bf16({w.embed}));
  STRATA_ASSIGN_TENSOR(out.final_norm, upload_norm(w.final_norm, config.norm_unit_offset));
  if (w.lm_head.data != w.embed.data) STRATA_ASSIGN_TENSOR(out.lm_head, upload_bf16({w.lm_head}));
  out.layers.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    STRATA_RETURN_IF_ERROR(upload_layer(config, w.layers[l], out.layers[l]));
  }
  return out;
}

namespace {

// An MLA layer's projections, random (the latent norms' weights F32, as uploaded ones are).
Status dummy_mla(const ModelConfig& c, DummyFiller& f, CudaLayerWeights& l) {
  const MlaConfig& m = c.mla;
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  const int64_t q_out = heads * m.qk_head_dim();
  if (m.q_lora_rank > 0) {
    STRATA_ASSIGN_TENSOR(l.q_a_proj, f.matrix(m.q_lora_rank * hidden));
    STRATA_ASSIGN_TENSOR(l.q_a_norm, f.norm_f32(m.q_lora_rank));
    STRATA_ASSIGN_TENSOR(l.q_b_proj, f.matrix(q_out * m.q_lora_rank));
  } else {
    STRATA_ASSIGN_TENSOR(l.q_proj, f.matrix(q_out * hidden));
  }
  STRATA_ASSIGN_TENSOR(l.kv_a_proj, f.matrix(m.latent_dim() * hidden));
  STRATA_ASSIGN_TENSOR(l.kv_a_norm, f.norm_f32(m.kv_lora_rank));
  STRATA_ASSIGN_TENSOR(l.kv_b_proj,
                       f.matrix(heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank));
  STRATA_ASSIGN_TENSOR(l.o_proj, f.matrix(hidden * heads * m.v_head_dim));
  return arrange_uk_t(c, l);
}

}  // namespace

Result<CudaDecoderWeights> dummy_weights(const ModelConfig& c, uint64_t seed) {
  DummyFiller f{seed};
  const int64_t hidden = c.hidden_size;
  const int64_t q_out = c.num_attention_heads * c.head_dim;
  const int64_t kv_out = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  CudaDecoderWeights out;
  STRATA_ASSIGN_TENSOR(out.embed, f.matrix(c.vocab_size * hidden));
  STRATA_ASSIGN_TENSOR(out.final_norm, f.norm(hidden));
  if (!c.tie_word_embeddings) STRATA_ASSIGN_TENSOR(out.lm_head, f.matrix(c.vocab_size * hidden));
  out.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (size_t layer = 0; layer < out.layers.size(); ++layer) {
    CudaLayerWeights& l = out.layers[layer];
    STRATA_ASSIGN_TENSOR(l.input_norm, f.norm(hidden));
    STRATA_ASSIGN_TENSOR(l.post_attention_norm, f.norm(hidden));
    if (c.sandwich_norms) {  // delta_weight of rms_norm: F32
      STRATA_ASSIGN_TENSOR(l.attn_output_norm, f.norm_f32(hidden));
      STRATA_ASSIGN_TENSOR(l.mlp_output_norm, f.norm_f32(hidden));
    }
    if (c.mla.enabled()) {
      STRATA_RETURN_IF_ERROR(dummy_mla(c, f, l));
    } else {
      STRATA_ASSIGN_TENSOR(l.qkv, f.matrix((q_out + 2 * kv_out) * hidden));
      if (c.qkv_bias) STRATA_ASSIGN_TENSOR(l.qkv_bias, f.matrix(q_out + 2 * kv_out));
      if (c.qk_norm) {
        STRATA_ASSIGN_TENSOR(l.q_norm, f.norm(c.head_dim));
        STRATA_ASSIGN_TENSOR(l.k_norm, f.norm(c.head_dim));
      }
      STRATA_ASSIGN_TENSOR(l.o_proj, f.matrix(hidden * q_out));
    }
    if (c.o_bias) STRATA_ASSIGN_TENSOR(l.o_bias, f.matrix(hidden));
    if (c.moe.is_moe(static_cast<int64_t>(layer))) {
      const int64_t experts = c.moe.num_experts, moe_inter = c.moe.moe_intermediate_size;
      STRATA_ASSIGN_TENSOR(l.router, f.matrix(experts * hidden));
      STRATA_ASSIGN_TENSOR(l.experts_gate_up, f.matrix(experts * 2 * moe_inter * hidden));
      STRATA_ASSIGN_TENSOR(l.experts_down, f.matrix(experts * hidden * moe_inter));
      if (c.moe.score_correction_bias) {
        STRATA_ASSIGN_TENSOR(l.score_bias, f.fill_f32(experts, -0.02f, 0.02f));
      }
      if (const int64_t shared = c.moe.shared_intermediate_size; shared > 0) {
        STRATA_ASSIGN_TENSOR(l.gate_up, f.matrix(2 * shared * hidden));
        STRATA_ASSIGN_TENSOR(l.down_proj, f.matrix(hidden * shared));
      }
      continue;
    }
    STRATA_ASSIGN_TENSOR(l.gate_up, f.matrix(2 * inter * hidden));
    STRATA_ASSIGN_TENSOR(l.down_proj, f.matrix(hidden * inter));
    if (c.mlp_bias) {
      STRATA_ASSIGN_TENSOR(l.gate_up_bias, f.matrix(2 * inter));
      STRATA_ASSIGN_TENSOR(l.down_bias, f.matrix(hidden));
    }
  }
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  return out;
}

}  // namespace strata::model

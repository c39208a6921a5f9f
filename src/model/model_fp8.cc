// Model's FP8 checkpoints. DeepSeek-V3's (quantization_config quant_method "fp8"): every F8_E4M3
// weight W [rows, cols] comes with W_scale_inv [ceil(rows / bm), ceil(cols / bn)] (bm x bn =
// weight_block_size, 128 x 128 in the released checkpoints), and its real value is
// fp8(W[r][c]) * scale_inv[r / bm][c / bn]. compressed-tensors' and FBGEMM's ("compressed-tensors",
// "fbgemm_fp8"): W_scale, one per output row or one for the whole tensor, the same product
// with blocks of one row (or all rows) by all columns. The CPU multiplies F32 / BF16 / F16 weights
// only, so each is dequantized once at load into a BF16 tensor the model owns (as DeepSeek's own
// fp8_cast_bf16 does: the product in fp32, rounded to bf16), and the bound view points there.

#include <string>
#include <unordered_map>

#include "core/error.h"
#include "model/fp8_block_dequant.h"
#include "model/model.h"

namespace strata::model {
namespace {

// Every weight view of the decoder, for the load-time conversion.
template <typename Fn>
void for_each_view(DecoderWeights& w, Fn fn) {
  fn(w.embed);
  fn(w.final_norm);
  fn(w.lm_head);
  for (LayerWeights& l : w.layers) {
    TensorView* const views[] = {&l.input_norm,
                                 &l.q_proj,
                                 &l.k_proj,
                                 &l.v_proj,
                                 &l.q_bias,
                                 &l.k_bias,
                                 &l.v_bias,
                                 &l.q_norm,
                                 &l.k_norm,
                                 &l.o_proj,
                                 &l.o_bias,
                                 &l.post_attention_norm,
                                 &l.attn_output_norm,
                                 &l.mlp_output_norm,
                                 &l.gate_proj,
                                 &l.up_proj,
                                 &l.down_proj,
                                 &l.gate_bias,
                                 &l.up_bias,
                                 &l.down_bias,
                                 &l.moe.router,
                                 &l.moe.score_bias,
                                 &l.moe.shared.gate_proj,
                                 &l.moe.shared.up_proj,
                                 &l.moe.shared.down_proj,
                                 &l.q_a_proj,
                                 &l.q_a_norm,
                                 &l.q_b_proj,
                                 &l.kv_a_proj,
                                 &l.kv_a_norm,
                                 &l.kv_b_proj};
    for (TensorView* v : views) {
      fn(*v);
    }
    for (ExpertWeights& e : l.moe.experts) {
      fn(e.gate_proj);
      fn(e.up_proj);
      fn(e.down_proj);
    }
  }
}

// The scales of F8_E4M3 weight `name` [rows, cols] and the rows and columns each covers:
// weight_scale_inv per block for "fp8"; otherwise weight_scale, one per output row ([rows, 1] or
// [rows]) or one for the tensor ([], [1] or [1, 1]).
struct Fp8Scales {
  TensorView scale;
  int64_t block_rows = 0, block_cols = 0;
};

Fp8Scales fp8_scales(const ModelConfig& config, const WeightStore& store, const std::string& name,
                     int64_t rows, int64_t cols) {
  const bool blocks = config.quant_scale_inverse_blocks();
  const std::string scale_name = name + (blocks ? "_scale_inv" : "_scale");
  if (!store.contains(scale_name)) {
    throw Error(store.source() + ": F8_E4M3 tensor '" + name + "' has no '" + scale_name + "' (" +
                (blocks ? "block-scaled FP8 needs one scale per " +
                              std::to_string(config.quant_block_rows) + "x" +
                              std::to_string(config.quant_block_cols) + " block"
                        : std::string("FP8 weights need one scale per output channel or tensor")) +
                ")");
  }
  Fp8Scales s;
  if (blocks) {
    const int64_t bm = config.quant_block_rows, bn = config.quant_block_cols;
    s.scale = store.get_checked(scale_name, {(rows + bm - 1) / bm, (cols + bn - 1) / bn});
    s.block_rows = bm;
    s.block_cols = bn;
  } else {
    s.scale = store.get(scale_name);
    const int64_t n = s.scale.numel();
    const TensorView& v = s.scale;
    const bool per_row = (v.rank == 1 || (v.rank == 2 && v.dim(1) == 1)) && v.dim(0) == rows;
    if (per_row) {
      s.block_rows = 1;
    } else if (n == 1) {
      s.block_rows = rows;
    } else {
      throw Error(store.source() + ": '" + scale_name + "' holds " + std::to_string(n) +
                  " scales in " + std::to_string(s.scale.rank) + " dimensions; '" + name +
                  "' has " + std::to_string(rows) + " rows (one scale per row, [" +
                  std::to_string(rows) + ", 1], or one for the tensor)");
    }
    s.block_cols = cols;
  }
  if (s.scale.dtype != DType::kF32 && s.scale.dtype != DType::kBF16 &&
      s.scale.dtype != DType::kF16) {
    throw Error(store.source() + ": '" + scale_name + "' is not a float tensor");
  }
  return s;
}

}  // namespace

void dequantize_block_fp8(const ModelConfig& config, const WeightStore& store,
                          DecoderWeights& weights, std::deque<std::vector<uint16_t>>& owned) {
  if (config.quant_method.empty() || !config.quant_unsupported.empty()) return;
  std::unordered_map<const void*, std::string> name_of;
  for (const std::string& name : store.names()) name_of[store.get(name).data] = name;
  std::unordered_map<const void*, size_t> done;  // a tied view converts once
  for_each_view(weights, [&](TensorView& v) {
    if (v.empty() || v.dtype != DType::kF8E4M3) return;
    if (const auto it = done.find(v.data); it != done.end()) {
      v.data = owned[it->second].data();
      v.dtype = DType::kBF16;
      return;
    }
    const auto named = name_of.find(v.data);
    if (named == name_of.end() || v.rank != 2) {
      throw Error(store.source() +
                  ": an F8_E4M3 weight that is not a whole 2-D tensor (fused "
                  "experts?) cannot be dequantized");
    }
    const int64_t rows = v.dim(0), cols = v.dim(1);
    const Fp8Scales s = fp8_scales(config, store, named->second, rows, cols);
    const int64_t scale_cols = (cols + s.block_cols - 1) / s.block_cols;
    std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
    const auto* codes = static_cast<const uint8_t*>(v.data);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float scale = load_as_f32(s.scale.data, s.scale.dtype,
                                        (r / s.block_rows) * scale_cols + c / s.block_cols);
        out[static_cast<size_t>(r * cols + c)] =
            f32_to_bf16(fp8_e4m3_to_f32(codes[r * cols + c]) * scale);
      }
    }
    done[v.data] = owned.size();
    owned.push_back(std::move(out));
    v.data = owned.back().data();
    v.dtype = DType::kBF16;
  });
}

void Model::dequantize_fp8_weights() {
  dequantize_block_fp8(config_, store_, weights_, fp8_dequantized_);
}

}  // namespace strata::model

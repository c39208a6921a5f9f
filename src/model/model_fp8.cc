// Model's block-scaled FP8 checkpoints (DeepSeek-V3's quantization_config quant_method "fp8"):
// every F8_E4M3 weight W [rows, cols] comes with W_scale_inv [ceil(rows / bm), ceil(cols / bn)]
// (bm x bn = weight_block_size, 128 x 128 in the released checkpoints), and its real value is
// fp8(W[r][c]) * scale_inv[r / bm][c / bn]. The CPU multiplies F32 / BF16 / F16 weights only, so
// each is dequantized once at load into a BF16 tensor the model owns (as DeepSeek's own
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

}  // namespace

void dequantize_block_fp8(const ModelConfig& config, const WeightStore& store,
                          DecoderWeights& weights, std::deque<std::vector<uint16_t>>& owned) {
  if (config.quant_method != "fp8") return;
  std::unordered_map<const void*, std::string> name_of;
  for (const std::string& name : store.names()) name_of[store.get(name).data] = name;
  const int64_t bm = config.quant_block_rows, bn = config.quant_block_cols;
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
    const std::string scale_name = named->second + "_scale_inv";
    if (!store.contains(scale_name)) {
      throw Error(store.source() + ": F8_E4M3 tensor '" + named->second + "' has no '" +
                  scale_name + "' (block-scaled FP8 needs one scale per " + std::to_string(bm) +
                  "x" + std::to_string(bn) + " block)");
    }
    const int64_t rows = v.dim(0), cols = v.dim(1);
    const TensorView scale =
        store.get_checked(scale_name, {(rows + bm - 1) / bm, (cols + bn - 1) / bn});
    if (scale.dtype != DType::kF32 && scale.dtype != DType::kBF16 && scale.dtype != DType::kF16) {
      throw Error(store.source() + ": '" + scale_name + "' is not a float tensor");
    }
    std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
    const auto* codes = static_cast<const uint8_t*>(v.data);
    const int64_t scale_cols = scale.dim(1);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float s = load_as_f32(scale.data, scale.dtype, (r / bm) * scale_cols + c / bn);
        out[static_cast<size_t>(r * cols + c)] =
            f32_to_bf16(fp8_e4m3_to_f32(codes[r * cols + c]) * s);
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

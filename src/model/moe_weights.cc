#include "model/moe_weights.h"

#include <functional>
#include <string>

namespace strata::model {
namespace {

struct ExpertTensor {
  const char* mixtral;  // after "experts.E."
  const char* qwen;
  TensorView ExpertWeights::*member;
  bool down;  // [hidden, I] instead of [I, hidden]
};

constexpr ExpertTensor kExpertTensors[] = {
    {"w1.weight", "gate_proj.weight", &ExpertWeights::gate_proj, false},
    {"w3.weight", "up_proj.weight", &ExpertWeights::up_proj, false},
    {"w2.weight", "down_proj.weight", &ExpertWeights::down_proj, true},
};

// "model.layers.N.block_sparse_moe." (Mixtral's hub names) or "model.layers.N.mlp.".
std::string block_prefix(const ModelConfig& c, int64_t layer_idx, bool fused) {
  const bool mixtral_names = c.architecture == Architecture::kMixtral && !fused;
  return "model.layers." + std::to_string(layer_idx) +
         (mixtral_names ? ".block_sparse_moe." : ".mlp.");
}

std::vector<int64_t> expert_shape(const ModelConfig& c, bool down) {
  const int64_t hidden = c.hidden_size, inter = c.moe.moe_intermediate_size;
  return down ? std::vector<int64_t>{hidden, inter} : std::vector<int64_t>{inter, hidden};
}

std::string expert_name(const ModelConfig& c, const std::string& prefix, int64_t e,
                        const ExpertTensor& t) {
  return prefix + "experts." + std::to_string(e) + "." +
         (c.architecture == Architecture::kMixtral ? t.mixtral : t.qwen);
}

// A [rows, cols] view of a fused tensor starting at row `first_row` of its flattened rows.
TensorView rows_of(TensorView fused, int64_t first_row, int64_t rows, int64_t cols) {
  TensorView v = fused;
  v.data = static_cast<const char*>(fused.data) + first_row * cols * dtype_size(fused.dtype);
  v.rank = 2;
  v.shape = {rows, cols, 0, 0};
  return v;
}

std::vector<ExpertWeights> bind_fused(const ModelConfig& c, const WeightStore& store,
                                      const std::string& prefix) {
  const int64_t num_experts = c.moe.num_experts, hidden = c.hidden_size;
  const int64_t inter = c.moe.moe_intermediate_size;
  const TensorView gate_up =
      store.get_checked(prefix + "experts.gate_up_proj", {num_experts, 2 * inter, hidden});
  const TensorView down =
      store.get_checked(prefix + "experts.down_proj", {num_experts, hidden, inter});
  std::vector<ExpertWeights> experts(static_cast<size_t>(num_experts));
  for (int64_t e = 0; e < num_experts; ++e) {
    ExpertWeights& x = experts[static_cast<size_t>(e)];
    x.gate_proj = rows_of(gate_up, 2 * inter * e, inter, hidden);
    x.up_proj = rows_of(gate_up, 2 * inter * e + inter, inter, hidden);
    x.down_proj = rows_of(down, hidden * e, hidden, inter);
  }
  return experts;
}

// DeepSeek's router bias and shared experts, when the config has them.
void for_each_deepseek_tensor(
    const ModelConfig& c, const std::string& prefix,
    const std::function<void(const std::string&, std::vector<int64_t>, TensorView*)>& fn,
    MoeWeights* w) {
  const int64_t hidden = c.hidden_size, shared = c.moe.shared_intermediate_size;
  if (c.moe.score_correction_bias) {
    fn(prefix + "gate.e_score_correction_bias", {c.moe.num_experts},
       w == nullptr ? nullptr : &w->score_bias);
  }
  if (shared > 0) {
    ExpertWeights* e = w == nullptr ? nullptr : &w->shared;
    fn(prefix + "shared_experts.gate_proj.weight", {shared, hidden},
       e == nullptr ? nullptr : &e->gate_proj);
    fn(prefix + "shared_experts.up_proj.weight", {shared, hidden},
       e == nullptr ? nullptr : &e->up_proj);
    fn(prefix + "shared_experts.down_proj.weight", {hidden, shared},
       e == nullptr ? nullptr : &e->down_proj);
  }
}

}  // namespace

void append_moe_tensors(const ModelConfig& config, int64_t layer_idx, TensorShapes& shapes) {
  const std::string prefix = block_prefix(config, layer_idx, /*fused=*/false);
  shapes.emplace_back(prefix + "gate.weight",
                      std::vector<int64_t>{config.moe.num_experts, config.hidden_size});
  for (int64_t e = 0; e < config.moe.num_experts; ++e) {
    for (const ExpertTensor& t : kExpertTensors) {
      shapes.emplace_back(expert_name(config, prefix, e, t), expert_shape(config, t.down));
    }
  }
  for_each_deepseek_tensor(
      config, prefix,
      [&](const std::string& name, std::vector<int64_t> shape, TensorView*) {
        shapes.emplace_back(name, std::move(shape));
      },
      nullptr);
}

MoeWeights bind_moe_weights(const ModelConfig& config, const WeightStore& store,
                            int64_t layer_idx) {
  const bool fused =
      store.contains(block_prefix(config, layer_idx, /*fused=*/true) + "experts.gate_up_proj");
  const std::string prefix = block_prefix(config, layer_idx, fused);
  MoeWeights w;
  w.router =
      store.get_checked(prefix + "gate.weight", {config.moe.num_experts, config.hidden_size});
  for_each_deepseek_tensor(
      config, prefix,
      [&](const std::string& name, std::vector<int64_t> shape, TensorView* view) {
        *view = store.get_checked(name, shape);
      },
      &w);
  if (fused) {
    w.experts = bind_fused(config, store, prefix);
    return w;
  }
  w.experts.resize(static_cast<size_t>(config.moe.num_experts));
  for (int64_t e = 0; e < config.moe.num_experts; ++e) {
    for (const ExpertTensor& t : kExpertTensors) {
      w.experts[static_cast<size_t>(e)].*t.member =
          store.get_checked(expert_name(config, prefix, e, t), expert_shape(config, t.down));
    }
  }
  return w;
}

}  // namespace strata::model

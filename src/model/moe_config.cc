#include "model/moe_config.h"

#include <string>

namespace strata::model {
namespace {

using nlohmann::json;

// transformers' MixtralConfig and Qwen3MoeConfig defaults for absent keys.
constexpr int64_t kMixtralDefaultExperts = 8;
constexpr int64_t kMixtralDefaultTopK = 2;
constexpr double kMixtralDefaultRopeTheta = 1e6;
constexpr int64_t kQwen3MoeDefaultExperts = 128;
constexpr int64_t kQwen3MoeDefaultTopK = 8;
constexpr int64_t kQwen3MoeDefaultMoeIntermediate = 768;

// "num_local_experts" is the stored name; "num_experts" its alias in both configs (and the name
// Qwen3-MoE checkpoints written before transformers 5 use).
int64_t num_experts(const JsonFields& f, int64_t fallback) {
  const std::optional<int64_t> local = f.opt_int("num_local_experts");
  const std::optional<int64_t> alias = f.opt_int("num_experts");
  if (local && alias && *local != *alias) {
    f.fail("'num_local_experts' (" + std::to_string(*local) + ") and its alias 'num_experts' (" +
           std::to_string(*alias) + ") disagree");
  }
  return local.value_or(alias.value_or(fallback));
}

bool rope_theta_given(const JsonFields& f) {
  if (f.has("rope_theta")) return true;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const json* params = f.opt_object(key);
    if (params != nullptr && params->contains("rope_theta") && !(*params)["rope_theta"].is_null()) {
      return true;
    }
  }
  return false;
}

// Qwen3-MoE's dense layers: those in mlp_only_layers, and those where (layer + 1) is not a
// multiple of decoder_sparse_step (Qwen3MoeDecoderLayer).
std::vector<bool> qwen3_moe_layers(const JsonFields& f, const ModelConfig& c) {
  const auto num_layers = static_cast<size_t>(c.num_hidden_layers);
  std::vector<bool> moe(num_layers, false);
  if (c.moe.num_experts == 0) return moe;
  const int64_t step = f.opt_int("decoder_sparse_step").value_or(1);
  f.check_in("decoder_sparse_step", step, 1, c.num_hidden_layers);
  for (size_t l = 0; l < num_layers; ++l) moe[l] = (static_cast<int64_t>(l) + 1) % step == 0;
  if (const json* dense = f.find("mlp_only_layers")) {
    if (!dense->is_array()) f.fail("'mlp_only_layers' must be a list of layer indices");
    for (const json& l : *dense) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 ||
          l.get<int64_t>() >= c.num_hidden_layers) {
        f.fail("'mlp_only_layers' entry " + quote(bounded_dump(l)) +
               " is not a layer index in [0, " + std::to_string(c.num_hidden_layers) + ")");
      }
      moe[l.get<size_t>()] = false;
    }
  }
  return moe;
}

}  // namespace

void parse_moe(const JsonFields& f, ModelConfig& c) {
  c.moe = MoeConfig{};
  const bool mixtral = c.architecture == Architecture::kMixtral;
  if (!mixtral && c.architecture != Architecture::kQwen3Moe) return;
  // router_jitter_noise scales the router's input in training only; eval ignores it, as we do.
  if (const std::optional<int64_t> shared = f.opt_int("shared_expert_intermediate_size");
      shared && *shared > 0) {
    f.fail("'shared_expert_intermediate_size' is " + std::to_string(*shared) +
           ": shared experts (Qwen2-MoE) are not supported");
  }
  MoeConfig& m = c.moe;
  m.num_experts = num_experts(f, mixtral ? kMixtralDefaultExperts : kQwen3MoeDefaultExperts);
  f.check_in(f.has("num_local_experts") ? "num_local_experts" : "num_experts", m.num_experts,
             mixtral ? 1 : 0, kMaxExperts);
  m.num_experts_per_tok = f.opt_int("num_experts_per_tok")
                              .value_or(mixtral ? kMixtralDefaultTopK : kQwen3MoeDefaultTopK);
  if (m.num_experts > 0) {
    f.check_in("num_experts_per_tok", m.num_experts_per_tok, 1, m.num_experts);
  }
  if (mixtral) {
    m.moe_intermediate_size = c.intermediate_size;
    m.norm_topk_prob = true;  // MixtralTopKRouter always renormalizes the top-k
    m.layer_is_moe.assign(static_cast<size_t>(c.num_hidden_layers), true);
    if (!rope_theta_given(f)) c.rope.theta = kMixtralDefaultRopeTheta;
    return;
  }
  m.moe_intermediate_size =
      f.opt_int("moe_intermediate_size").value_or(kQwen3MoeDefaultMoeIntermediate);
  f.check_in("moe_intermediate_size", m.moe_intermediate_size, 1, int64_t{1} << 31);
  m.norm_topk_prob = f.opt_bool("norm_topk_prob").value_or(false);
  m.layer_is_moe = qwen3_moe_layers(f, c);
}

}  // namespace strata::model

#include "model/deepseek_config.h"

#include <cmath>
#include <string>

namespace strata::model {
namespace {

// transformers' DeepseekV2Config / DeepseekV3Config defaults for absent keys.
struct Defaults {
  int64_t kv_lora_rank, q_lora_rank, qk_nope, qk_rope, v_head_dim;
  int64_t routed_experts, shared_experts, moe_intermediate, top_k, first_k_dense;
  double routed_scaling_factor;
  bool norm_topk_prob;
};
constexpr Defaults kV2 = {512, 1536, 128, 64, 128, 64, 2, 1407, 0, 0, 1.0, false};
constexpr Defaults kV3 = {512, 1536, 128, 64, 128, 256, 1, 2048, 8, 3, 2.5, true};
constexpr int64_t kMaxDim = 1 << 20;

int64_t size_key(const JsonFields& f, std::string_view key, int64_t fallback, int64_t lo) {
  const int64_t v = f.opt_int(key).value_or(fallback);
  f.check_in(key, v, lo, kMaxDim);
  return v;
}

// transformers' yarn_get_mscale.
double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

void parse_mla(const nlohmann::json& config, const JsonFields& f, const Defaults& d,
               ModelConfig& c) {
  MlaConfig& m = c.mla;
  m.kv_lora_rank = size_key(f, "kv_lora_rank", d.kv_lora_rank, 1);
  // An explicit null q_lora_rank (DeepSeek-V2-Lite) is q_proj; absent takes the class default.
  if (f.has("q_lora_rank")) {
    m.q_lora_rank = size_key(f, "q_lora_rank", 0, 1);
  } else {
    m.q_lora_rank = config.contains("q_lora_rank") ? 0 : d.q_lora_rank;
  }
  m.qk_nope_head_dim = size_key(f, "qk_nope_head_dim", d.qk_nope, 1);
  m.qk_rope_head_dim = size_key(f, "qk_rope_head_dim", d.qk_rope, 2);
  if (m.qk_rope_head_dim % 2 != 0) f.fail("'qk_rope_head_dim' must be even");
  m.v_head_dim = size_key(f, "v_head_dim", d.v_head_dim, 1);
  m.rope_interleave =
      c.architecture == Architecture::kDeepseekV2 || f.opt_bool("rope_interleave").value_or(true);
  double scale = 1.0 / std::sqrt(static_cast<double>(m.qk_head_dim()));
  if (c.rope.type != RopeConfig::Type::kDefault && c.rope.mscale_all_dim != 0.0) {
    const double mscale = yarn_mscale(c.rope.factor, c.rope.mscale_all_dim);
    scale *= mscale * mscale;
  }
  m.softmax_scale = scale;
  c.head_dim = m.qk_rope_head_dim;  // the RoPE tables' width
}

// Which layers are MoE: layer >= first_k_dense_replace and layer % moe_layer_freq == 0
// (DeepSeek's own modeling code; every released config has moe_layer_freq 1).
void parse_moe_layers(const JsonFields& f, const Defaults& d, ModelConfig& c) {
  const int64_t first_dense = f.opt_int("first_k_dense_replace").value_or(d.first_k_dense);
  f.check_in("first_k_dense_replace", first_dense, 0, c.num_hidden_layers);
  const int64_t freq = f.opt_int("moe_layer_freq").value_or(1);
  f.check_in("moe_layer_freq", freq, 1, c.num_hidden_layers);
  c.moe.layer_is_moe.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (c.moe.num_experts == 0) return;
  for (int64_t l = first_dense; l < c.num_hidden_layers; ++l) {
    c.moe.layer_is_moe[static_cast<size_t>(l)] = l % freq == 0;
  }
}

void parse_routing(const JsonFields& f, const Defaults& d, bool v3, MoeConfig& m) {
  const std::string scoring = f.opt_string("scoring_func").value_or(v3 ? "sigmoid" : "softmax");
  if (scoring != (v3 ? "sigmoid" : "softmax")) {
    f.fail("'scoring_func' is " + quote(scoring) + "; " + (v3 ? "DeepSeek-V3" : "DeepSeek-V2") +
           " routes by " + (v3 ? "sigmoid" : "softmax"));
  }
  m.scoring = v3 ? MoeScoring::kSigmoid : MoeScoring::kSoftmax;
  const std::string method = f.opt_string("topk_method").value_or(v3 ? "noaux_tc" : "greedy");
  if (v3 && method != "noaux_tc") {
    f.fail("'topk_method' is " + quote(method) + "; DeepSeek-V3 routes by noaux_tc");
  }
  if (v3) {
    m.topk_method = MoeTopkMethod::kNoAuxTc;
  } else if (method == "greedy") {
    m.topk_method = MoeTopkMethod::kGreedy;
  } else if (method == "group_limited_greedy") {
    m.topk_method = MoeTopkMethod::kGroupLimitedGreedy;
  } else {
    f.fail("'topk_method' is " + quote(method) +
           "; DeepSeek-V2 supports greedy and group_limited_greedy");
  }
  m.num_groups = f.opt_int("n_group").value_or(v3 ? 8 : 1);
  m.topk_groups = f.opt_int("topk_group").value_or(v3 ? 4 : 1);
  if (m.topk_method != MoeTopkMethod::kGreedy) {
    f.check_in("n_group", m.num_groups, 1, m.num_experts);
    if (m.num_experts % m.num_groups != 0) {
      f.fail("'n_routed_experts' (" + std::to_string(m.num_experts) +
             ") is not a multiple of 'n_group' (" + std::to_string(m.num_groups) + ")");
    }
    f.check_in("topk_group", m.topk_groups, 1, m.num_groups);
    const int64_t per_group = m.num_experts / m.num_groups;
    if (m.num_experts_per_tok > m.topk_groups * per_group) {
      f.fail("'num_experts_per_tok' (" + std::to_string(m.num_experts_per_tok) +
             ") exceeds the experts of 'topk_group' groups (" +
             std::to_string(m.topk_groups * per_group) + ")");
    }
    if (v3 && per_group < 2) f.fail("noaux_tc needs at least 2 experts per group ('n_group')");
  } else {
    m.num_groups = m.topk_groups = 1;
  }
  m.routed_scaling_factor = f.opt_number("routed_scaling_factor").value_or(d.routed_scaling_factor);
  if (!(m.routed_scaling_factor > 0.0) || !std::isfinite(m.routed_scaling_factor)) {
    f.fail("'routed_scaling_factor' must be a positive finite number");
  }
  // transformers' V2 router never renormalizes; V3's does when norm_topk_prob.
  m.norm_topk_prob = v3 && f.opt_bool("norm_topk_prob").value_or(d.norm_topk_prob);
  m.score_correction_bias = v3;
}

void parse_deepseek_moe(const JsonFields& f, const Defaults& d, bool v3, ModelConfig& c) {
  MoeConfig& m = c.moe;
  m = MoeConfig{};
  m.num_experts = f.opt_int("n_routed_experts").value_or(d.routed_experts);
  f.check_in("n_routed_experts", m.num_experts, 0, kMaxExperts);
  if (m.num_experts > 0) {
    m.num_experts_per_tok = f.opt_int("num_experts_per_tok").value_or(d.top_k);
    f.check_in("num_experts_per_tok", m.num_experts_per_tok, 1, m.num_experts);
    m.moe_intermediate_size = size_key(f, "moe_intermediate_size", d.moe_intermediate, 1);
    const int64_t shared = f.opt_int("n_shared_experts").value_or(d.shared_experts);
    f.check_in("n_shared_experts", shared, 0, kMaxExperts);
    m.shared_intermediate_size = shared * m.moe_intermediate_size;
    parse_routing(f, d, v3, m);
  }
  parse_moe_layers(f, d, c);
}

}  // namespace

void parse_deepseek(const nlohmann::json& config, const JsonFields& f, ModelConfig& c) {
  const bool v3 = c.architecture == Architecture::kDeepseekV3;
  if (!v3 && c.architecture != Architecture::kDeepseekV2) return;
  if (f.opt_bool("attention_bias").value_or(false)) {
    f.fail("'attention_bias' is true: DeepSeek attention biases are not supported");
  }
  if (f.opt_bool("mlp_bias").value_or(false)) {
    f.fail("'mlp_bias' is true: DeepSeek MLP biases are not supported");
  }
  const Defaults& d = v3 ? kV3 : kV2;
  parse_mla(config, f, d, c);
  parse_deepseek_moe(f, d, v3, c);
}

}  // namespace strata::model

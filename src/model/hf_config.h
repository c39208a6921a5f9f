#pragma once
// ModelConfig: the parts of a Hugging Face config.json that Strata's decoder-only models need,
// parsed from either the transformers 4.x or the 5.x spelling (rope_theta + rope_scaling, or
// rope_parameters; torch_dtype or dtype) into one plain struct.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::model {

enum class Architecture {
  kLlama,
  kMistral,
  kQwen2,
  kQwen3,
  kMixtral,
  kQwen3Moe,
  kGemma3,
  kDeepseekV2,
  kDeepseekV3,
};

// The transformers class name: "LlamaForCausalLM", ...
std::string_view architecture_name(Architecture arch);

struct RopeConfig {
  enum class Type { kDefault, kLinear, kLlama3, kYarn };

  Type type = Type::kDefault;
  double theta = 10000.0;
  double factor = 1.0;            // kLinear, kLlama3: positions (or low frequencies) divided by it
  double low_freq_factor = 0.0;   // kLlama3 only, else 0
  double high_freq_factor = 0.0;  // kLlama3 only, else 0
  int64_t original_max_position_embeddings = 0;  // kLlama3, kYarn; else 0
  // kYarn only (transformers' _compute_yarn_parameters): the ramp between interpolated and
  // extrapolated frequencies, and the factor cos and sin are multiplied by (attention_factor, or
  // from mscale / mscale_all_dim when absent; 0 = not given).
  double beta_fast = 0.0, beta_slow = 0.0;
  double attention_factor = 0.0;
  double mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;

  bool operator==(const RopeConfig&) const = default;
};

// Which expert scores route a token, and how the top-k is chosen (DeepSeek; moe_config.h).
enum class MoeScoring { kSoftmax, kSigmoid };
enum class MoeTopkMethod {
  kGreedy,              // the k best scores
  kGroupLimitedGreedy,  // DeepSeek-V2: the k best within the topk_groups groups of best max score
  kNoAuxTc,  // DeepSeek-V3: score + bias choose (groups by their top-2 sum), scores weigh
};

// The sparse MoE block of Mixtral and Qwen3-MoE (moe_config.cc): a router (a linear layer to
// num_experts logits), softmax over all experts in fp32, the num_experts_per_tok largest
// probabilities (ties to the lower expert id), divided by their sum when norm_topk_prob, and
// each token's output the weighted sum of its experts' SwiGLU MLPs of moe_intermediate_size.
// num_experts == 0: no MoE layer.
struct MoeConfig {
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;    // in [1, num_experts] when num_experts > 0
  int64_t moe_intermediate_size = 0;  // Mixtral: intermediate_size
  bool norm_topk_prob = true;         // Mixtral: always; Qwen3-MoE: as the config says
  std::vector<bool> layer_is_moe;     // [num_hidden_layers]; false: the dense MLP
  // DeepSeek-V2 / V3 (Mixtral and Qwen3-MoE keep these defaults): how experts are scored and
  // chosen, the experts split into num_groups groups of which topk_groups may be chosen, every
  // routed weight times routed_scaling_factor, a router bias (e_score_correction_bias) that only
  // chooses, and shared experts: one SwiGLU MLP of shared_intermediate_size every token runs,
  // added to the routed sum (0: none).
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopkMethod topk_method = MoeTopkMethod::kGreedy;
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  double routed_scaling_factor = 1.0;
  bool score_correction_bias = false;
  int64_t shared_intermediate_size = 0;

  bool is_moe(int64_t layer_idx) const {
    return !layer_is_moe.empty() && layer_is_moe[static_cast<size_t>(layer_idx)];
  }
  bool any_moe_layer() const {
    for (const bool moe : layer_is_moe) {
      if (moe) return true;
    }
    return false;
  }
  bool operator==(const MoeConfig&) const = default;
};

// The MLP's activation: SwiGLU's silu, or GeGLU's tanh-approximated GELU (gelu_pytorch_tanh).
enum class MlpActivation { kSilu, kGeluTanh };

// Multi-head Latent Attention (DeepSeek-V2 / V3; deepseek_config.h). kv_lora_rank == 0: not MLA.
// Each token caches one latent of kv_lora_rank + qk_rope_head_dim channels per layer: the
// normed compressed KV and the rotated key part every head shares.
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: q_proj; else q_a_proj -> q_a_layernorm -> q_b_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // RoPE over interleaved channel pairs (2i, 2i + 1) (DeepSeek's layout: V2 always, V3 unless
  // rope_interleave is false), else rotate_half's (i, i + rope_dim / 2).
  bool rope_interleave = true;
  // The softmax scale: 1 / sqrt(qk_nope + qk_rope), times mscale^2 under YaRN with
  // mscale_all_dim (transformers' yarn_apply_mscale).
  double softmax_scale = 0.0;

  bool enabled() const { return kv_lora_rank > 0; }
  int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool operator==(const MlaConfig&) const = default;
};

// The most layers, and MoE experts, a config.json may declare: guards against absurd allocations.
inline constexpr int64_t kMaxConfigLayers = 1 << 16;
inline constexpr int64_t kMaxExperts = 1 << 16;

// Every size is validated positive; num_attention_heads % num_key_value_heads == 0;
// layer_sliding_window.size() == num_hidden_layers.
struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // "llama", "qwen3_moe", ..., as written (may be empty)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // default: num_attention_heads
  int64_t head_dim = 0;             // explicit "head_dim", else hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  std::string hidden_act = "silu";  // as written (Gemma 3: hidden_activation); see mlp_activation
  bool qkv_bias = false;            // q_proj, k_proj, v_proj have biases
  bool o_bias = false;              // o_proj has a bias
  bool mlp_bias = false;            // gate_proj, up_proj, down_proj have biases
  bool qk_norm = false;             // per-head RMSNorm on q and k before RoPE (Qwen3)
  bool tie_word_embeddings = false;
  std::vector<int64_t> bos_token_ids;  // empty when null or absent
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype;  // "bfloat16", ...; empty when absent
  // quantization_config.quant_method, empty when the weights are not quantized. F8_E4M3 weights
  // are dequantized at load (fp8_block_dequant.h): "fp8" (DeepSeek-V3: weight_scale_inv per
  // weight_block_size block), "compressed-tensors" (8-bit float weights, strategy channel or
  // tensor) and "fbgemm_fp8" (weight_scale per output channel or per tensor).
  std::string quant_method;
  // Why Model::load cannot load these weights ("quant_method 'awq'", "4-bit int weights, ..."),
  // empty when it can.
  std::string quant_unsupported;
  // quantization_config.weight_block_size for "fp8": the rows and columns one scale covers.
  int64_t quant_block_rows = 128, quant_block_cols = 128;
  // F8_E4M3 weights scaled by <weight>_scale_inv blocks ("fp8") rather than <weight>_scale.
  bool quant_scale_inverse_blocks() const { return quant_method == "fp8"; }
  // FP8 weights with one scale per output channel or per tensor (compressed-tensors, FBGEMM):
  // the GPU's per-channel FP8 (--quantization fp8) holds them again, so --quantization auto runs
  // them in FP8. Not DeepSeek-V3's 128 x 128 blocks: one scale per row would coarsen them.
  bool fp8_weights_per_channel() const {
    return quant_unsupported.empty() &&
           (quant_method == "compressed-tensors" || quant_method == "fbgemm_fp8");
  }
  RopeConfig rope;
  std::vector<int32_t> layer_sliding_window;  // per layer: window in tokens, 0 = full attention
  MoeConfig moe;  // Mixtral, Qwen3-MoE, DeepSeek; empty for the dense architectures
  MlaConfig mla;  // DeepSeek-V2 / V3; empty for every other architecture
  // Gemma 3 (gemma3_config.h); every other architecture keeps these defaults.
  MlpActivation mlp_activation = MlpActivation::kSilu;
  bool norm_unit_offset = false;  // every RMSNorm (q/k norms too) multiplies by (1 + weight)
  // Norms on the attention's and the MLP's outputs before their residual adds, the MLP's input
  // norm named pre_feedforward_layernorm (post_attention_layernorm is the attention output's).
  bool sandwich_norms = false;
  // Embeddings times sqrt(hidden_size), the factor rounded to the embedding table's dtype.
  bool scale_embeddings = false;
  double query_pre_attn_scalar = 0.0;  // > 0: attention scale 1 / sqrt(it); 0: 1 / sqrt(head_dim)
  double final_logit_softcapping = 0.0;    // > 0: logits = cap * tanh(logits / cap); 0: none
  std::optional<RopeConfig> sliding_rope;  // the sliding-window layers' RoPE, when it differs
  // Prepended to every tensor name: "language_model." for the text model of a multimodal
  // checkpoint (Gemma3ForConditionalGeneration in transformers 4's layout; the binding also
  // finds transformers 5's "model.language_model."), else empty.
  std::string weight_prefix;

  bool operator==(const ModelConfig&) const = default;
};

// Reads `dir`/config.json. Throws strata::Error when it is missing, malformed, or describes an
// unsupported model (architecture, activation, RoPE type), naming the file and the key.
ModelConfig load_model_config(const std::filesystem::path& dir);

// Parses config.json text; `source_name` is used in messages. Throws strata::Error like
// load_model_config.
ModelConfig parse_model_config_text(std::string_view json_text, std::string_view source_name);

}  // namespace strata::model

#pragma once
// ModelConfig: the parts of a Hugging Face config.json that Strata's decoder-only models need,
// parsed from either the transformers 4.x or the 5.x spelling (rope_theta + rope_scaling, or
// rope_parameters; torch_dtype or dtype) into one plain struct.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace strata::model {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };

// The transformers class name: "LlamaForCausalLM", ...
std::string_view architecture_name(Architecture arch);

struct RopeConfig {
  enum class Type { kDefault, kLinear, kLlama3 };

  Type type = Type::kDefault;
  double theta = 10000.0;
  double factor = 1.0;            // kLinear, kLlama3: positions (or low frequencies) divided by it
  double low_freq_factor = 0.0;   // kLlama3 only, else 0
  double high_freq_factor = 0.0;  // kLlama3 only, else 0
  int64_t original_max_position_embeddings = 0;  // kLlama3 only, else 0

  bool operator==(const RopeConfig&) const = default;
};

// Every size is validated positive; num_attention_heads % num_key_value_heads == 0;
// layer_sliding_window.size() == num_hidden_layers.
struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3", as written (may be empty)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // default: num_attention_heads
  int64_t head_dim = 0;             // explicit "head_dim", else hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  std::string hidden_act = "silu";  // the only supported activation
  bool qkv_bias = false;            // q_proj, k_proj, v_proj have biases
  bool o_bias = false;              // o_proj has a bias
  bool mlp_bias = false;            // gate_proj, up_proj, down_proj have biases
  bool qk_norm = false;             // per-head RMSNorm on q and k before RoPE (Qwen3)
  bool tie_word_embeddings = false;
  std::vector<int64_t> bos_token_ids;  // empty when null or absent
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype;  // "bfloat16", ...; empty when absent
  RopeConfig rope;
  std::vector<int32_t> layer_sliding_window;  // per layer: window in tokens, 0 = full attention

  bool operator==(const ModelConfig&) const = default;
};

// Reads `dir`/config.json. Throws strata::Error when it is missing, malformed, or describes an
// unsupported model (architecture, activation, RoPE type), naming the file and the key.
ModelConfig load_model_config(const std::filesystem::path& dir);

// Parses config.json text; `source_name` is used in messages. Throws strata::Error like
// load_model_config.
ModelConfig parse_model_config_text(std::string_view json_text, std::string_view source_name);

}  // namespace strata::model

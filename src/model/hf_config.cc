#include "model/hf_config.h"

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/deepseek_config.h"
#include "model/gemma3_config.h"
#include "model/json_fields.h"
#include "model/moe_config.h"

namespace strata::model {
namespace {

using nlohmann::json;

struct ArchInfo {
  Architecture arch;
  std::string_view class_name;
  std::string_view model_type;
};

constexpr std::array<ArchInfo, 9> kArchitectures = {{
    {Architecture::kLlama, "LlamaForCausalLM", "llama"},
    {Architecture::kMistral, "MistralForCausalLM", "mistral"},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2"},
    {Architecture::kQwen3, "Qwen3ForCausalLM", "qwen3"},
    {Architecture::kMixtral, "MixtralForCausalLM", "mixtral"},
    {Architecture::kQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe"},
    {Architecture::kGemma3, "Gemma3ForCausalLM", "gemma3_text"},
    {Architecture::kDeepseekV2, "DeepseekV2ForCausalLM", "deepseek_v2"},
    {Architecture::kDeepseekV3, "DeepseekV3ForCausalLM", "deepseek_v3"},
}};

// Guards against configs whose sizes would make Strata allocate absurd amounts before failing.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
// transformers' Qwen3Config default when "head_dim" is absent.
constexpr int64_t kQwen3DefaultHeadDim = 128;
// transformers' Qwen2Config / Qwen3Config default for "max_window_layers".
constexpr int64_t kQwenDefaultMaxWindowLayers = 28;

std::string supported_architectures() {
  std::string s;
  for (const ArchInfo& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.class_name);
  return s;
}

Architecture parse_architecture(const JsonFields& f) {
  if (const json* archs = f.find("architectures")) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      f.fail("'architectures' must be a non-empty list of strings, e.g. [\"LlamaForCausalLM\"]");
    }
    const auto& name = (*archs)[0].get_ref<const std::string&>();
    for (const ArchInfo& a : kArchitectures) {
      if (a.class_name == name) return a.arch;
    }
    f.fail("unsupported architecture " + quote(name) + "; Strata supports " +
           supported_architectures());
  }
  // No "architectures": fall back to model_type, as AutoModelForCausalLM would.
  const std::string model_type = f.opt_string("model_type").value_or("");
  for (const ArchInfo& a : kArchitectures) {
    if (a.model_type == model_type) return a.arch;
  }
  f.fail("cannot tell the architecture: no 'architectures' list and model_type " +
         quote(model_type) +
         " is not one of llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, gemma3_text, gemma3, "
         "deepseek_v2, deepseek_v3");
}

void check_positive_finite(const JsonFields& f, std::string_view key, double value) {
  if (!(value > 0.0) || !std::isfinite(value)) {
    f.fail(f.name(key) + " must be a positive finite number, got " + std::to_string(value));
  }
}

void parse_sizes(const JsonFields& f, ModelConfig& c) {
  c.vocab_size = f.get_int("vocab_size");
  c.hidden_size = f.get_int("hidden_size");
  c.intermediate_size = f.get_int("intermediate_size");
  c.num_hidden_layers = f.get_int("num_hidden_layers");
  c.num_attention_heads = f.get_int("num_attention_heads");
  c.max_position_embeddings = f.get_int("max_position_embeddings");
  f.check_in("vocab_size", c.vocab_size, 1, kMaxSize);
  f.check_in("hidden_size", c.hidden_size, 1, kMaxSize);
  f.check_in("intermediate_size", c.intermediate_size, 1, kMaxSize);
  f.check_in("num_hidden_layers", c.num_hidden_layers, 1, kMaxConfigLayers);
  f.check_in("num_attention_heads", c.num_attention_heads, 1, kMaxSize);
  f.check_in("max_position_embeddings", c.max_position_embeddings, 1, kMaxSize);
  c.num_key_value_heads = f.opt_int("num_key_value_heads").value_or(c.num_attention_heads);
  f.check_in("num_key_value_heads", c.num_key_value_heads, 1, kMaxSize);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    f.fail("num_attention_heads " + std::to_string(c.num_attention_heads) +
           " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
  }
  if (const auto head_dim = f.opt_int("head_dim")) {
    c.head_dim = *head_dim;
  } else if (c.architecture == Architecture::kQwen3) {
    c.head_dim = kQwen3DefaultHeadDim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      f.fail("hidden_size " + std::to_string(c.hidden_size) + " is not a multiple of " +
             "num_attention_heads " + std::to_string(c.num_attention_heads) +
             "; set 'head_dim' explicitly");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  f.check_in("head_dim", c.head_dim, 1, kMaxSize);
  c.rms_norm_eps = f.opt_number("rms_norm_eps").value_or(1e-6);
  check_positive_finite(f, "rms_norm_eps", c.rms_norm_eps);
}

// SwiGLU (silu) for every architecture but Gemma 3, whose key is hidden_activation and whose
// MLP is GeGLU with the tanh-approximated GELU.
void parse_activation(const JsonFields& f, ModelConfig& c) {
  if (c.architecture == Architecture::kGemma3) {
    c.hidden_act = f.opt_string("hidden_activation").value_or("gelu_pytorch_tanh");
    if (c.hidden_act != "gelu_pytorch_tanh") {
      f.fail("unsupported hidden_activation " + quote(c.hidden_act) +
             "; Strata supports gelu_pytorch_tanh for Gemma 3");
    }
    c.mlp_activation = MlpActivation::kGeluTanh;
    return;
  }
  c.hidden_act = f.opt_string("hidden_act").value_or("silu");
  if (c.hidden_act != "silu") {
    f.fail("unsupported hidden_act " + quote(c.hidden_act) + "; Strata supports silu");
  }
  c.mlp_activation = MlpActivation::kSilu;
}

// Which projections carry biases, per architecture (transformers' modeling_*.py).
void parse_biases(const JsonFields& f, ModelConfig& c) {
  const bool attention_bias = f.opt_bool("attention_bias").value_or(false);
  switch (c.architecture) {
    case Architecture::kLlama:
      c.qkv_bias = c.o_bias = attention_bias;
      c.mlp_bias = f.opt_bool("mlp_bias").value_or(false);
      c.qk_norm = false;
      return;
    case Architecture::kMistral:
    case Architecture::kMixtral:
    case Architecture::kDeepseekV2:  // attention_bias / mlp_bias: refused in deepseek_config.cc
    case Architecture::kDeepseekV3:
      c.qkv_bias = c.o_bias = c.mlp_bias = c.qk_norm = false;
      return;
    case Architecture::kQwen2:
      c.qkv_bias = true;
      c.o_bias = c.mlp_bias = c.qk_norm = false;
      return;
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
    case Architecture::kGemma3:
      c.qkv_bias = c.o_bias = attention_bias;
      c.mlp_bias = false;
      c.qk_norm = true;
      return;
  }
}

RopeConfig::Type parse_rope_type(const JsonFields& f) {
  // "rope_type" is the current key; "type" the legacy one (transformers < 4.43).
  const std::string type =
      f.opt_string("rope_type").value_or(f.opt_string("type").value_or("default"));
  if (type == "default") return RopeConfig::Type::kDefault;
  if (type == "linear") return RopeConfig::Type::kLinear;
  if (type == "llama3") return RopeConfig::Type::kLlama3;
  if (type == "yarn") return RopeConfig::Type::kYarn;
  f.fail("unsupported RoPE type " + quote(type) +
         "; Strata supports default, linear, llama3, yarn");
}

// 4.x: "rope_theta" + optional "rope_scaling" object; 5.x: "rope_parameters" object holding the
// type, theta and scaling keys. rope_parameters wins when both are present.
RopeConfig parse_rope(const JsonFields& top, std::string_view source) {
  RopeConfig rope;
  rope.theta = top.opt_number("rope_theta").value_or(10000.0);
  const json* params = top.opt_object("rope_parameters");
  std::string_view prefix = "rope_parameters.";
  if (params == nullptr) {
    params = top.opt_object("rope_scaling");
    prefix = "rope_scaling.";
  }
  if (params != nullptr) rope = parse_rope_params(JsonFields(*params, source, prefix), rope.theta);
  check_positive_finite(top, "rope_theta", rope.theta);
  return rope;
}

// The sliding window in effect, before layer_types / max_window_layers pick the layers.
std::optional<int64_t> effective_window(const JsonFields& f, Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
    case Architecture::kDeepseekV2:
    case Architecture::kDeepseekV3:
      return std::nullopt;
    case Architecture::kMistral:
    case Architecture::kMixtral:
    case Architecture::kGemma3:
      return f.opt_int("sliding_window");
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:  // on every layer: Qwen3-MoE has no max_window_layers
      if (!f.opt_bool("use_sliding_window").value_or(false)) return std::nullopt;
      return f.opt_int("sliding_window");
  }
  return std::nullopt;
}

std::vector<int32_t> parse_sliding_windows(const JsonFields& f, const ModelConfig& c) {
  const std::optional<int64_t> window = effective_window(f, c.architecture);
  if (window) f.check_in("sliding_window", *window, 1, kMaxSize);
  const auto num_layers = static_cast<size_t>(c.num_hidden_layers);
  std::vector<int32_t> windows(num_layers, 0);
  if (const json* types = f.find("layer_types")) {
    if (!types->is_array() || types->size() != num_layers) {
      f.fail("'layer_types' must be a list of " + std::to_string(num_layers) +
             " strings (one per layer)");
    }
    for (size_t i = 0; i < num_layers; ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") {
        if (!window) {
          f.fail(
              "'layer_types' marks layer " + std::to_string(i) +
              " as sliding_attention, but "
              "no sliding window is in effect (sliding_window null or use_sliding_window false)");
        }
        windows[i] = static_cast<int32_t>(*window);
      } else if (t != "full_attention") {
        f.fail("'layer_types' entry " + std::to_string(i) + " is " + quote(bounded_dump(t)) +
               "; supported: full_attention, sliding_attention");
      }
    }
    return windows;
  }
  if (!window) return windows;
  int64_t first = 0;
  if (c.architecture == Architecture::kQwen2 || c.architecture == Architecture::kQwen3) {
    first = f.opt_int("max_window_layers").value_or(kQwenDefaultMaxWindowLayers);
    if (first < 0) f.fail("'max_window_layers' must be >= 0, got " + std::to_string(first));
  }
  for (int64_t i = first; i < c.num_hidden_layers; ++i) {
    windows[static_cast<size_t>(i)] = static_cast<int32_t>(*window);
  }
  return windows;
}

// compressed-tensors' quantization_config: which weights each config group quantizes and how.
// The FP8 checkpoints (format float-quantized: every group's weights 8-bit floats, one scale per
// output channel or per tensor) load; what else makes them unloadable, or "" when nothing.
// input_activations (dynamic per token, or static input_scale tensors) do not matter: the
// weights are dequantized at load and the activations stay in the model's dtype.
std::string compressed_tensors_unsupported(const JsonFields& qf, std::string_view source) {
  const json* groups = qf.opt_object("config_groups");
  if (groups == nullptr || groups->empty()) qf.fail(qf.name("config_groups") + " is missing");
  for (const auto& [name, group] : groups->items()) {
    const std::string prefix = "quantization_config.config_groups." + name + ".";
    if (!group.is_object()) qf.fail(qf.name("config_groups." + name) + " must be an object");
    const JsonFields gf(group, source, prefix);
    const json* weights = gf.opt_object("weights");
    if (weights == nullptr) continue;  // activations only
    const std::string weights_prefix = prefix + "weights.";
    const JsonFields wf(*weights, source, weights_prefix);
    const int64_t bits = wf.opt_int("num_bits").value_or(0);
    const std::string type = wf.opt_string("type").value_or("");
    const std::string strategy = wf.opt_string("strategy").value_or("");
    if (bits != 8 || type != "float" || (strategy != "channel" && strategy != "tensor")) {
      return "compressed-tensors " + std::to_string(bits) + "-bit " + quote(type) +
             " weights with strategy " + quote(strategy);
    }
  }
  return "";
}

ModelConfig parse_model_config(const json& config, std::string_view source) {
  const JsonFields f(config, source);
  ModelConfig c;
  c.architecture = parse_architecture(f);
  c.model_type = f.opt_string("model_type").value_or("");
  parse_sizes(f, c);
  parse_activation(f, c);
  parse_biases(f, c);
  c.tie_word_embeddings = f.opt_bool("tie_word_embeddings").value_or(false);
  c.bos_token_ids = f.id_list("bos_token_id");
  c.eos_token_ids = f.id_list("eos_token_id");
  // "dtype" in transformers 5.x, "torch_dtype" in 4.x.
  c.torch_dtype = f.opt_string("dtype").value_or(f.opt_string("torch_dtype").value_or(""));
  if (const json* q = f.opt_object("quantization_config")) {
    const JsonFields qf(*q, source, "quantization_config.");
    c.quant_method = qf.opt_string("quant_method").value_or("unknown");
    if (c.quant_method == "compressed-tensors") {
      c.quant_unsupported = compressed_tensors_unsupported(qf, source);
    } else if (c.quant_method != "fp8" && c.quant_method != "fbgemm_fp8") {
      c.quant_unsupported = "quant_method " + quote(c.quant_method);
    }
    if (const json* block = qf.find("weight_block_size")) {
      if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
          !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() < 1 ||
          (*block)[1].get<int64_t>() < 1 || (*block)[0].get<int64_t>() > kMaxSize ||
          (*block)[1].get<int64_t>() > kMaxSize) {
        qf.fail("'quantization_config.weight_block_size' must be two positive integers");
      }
      c.quant_block_rows = (*block)[0].get<int64_t>();
      c.quant_block_cols = (*block)[1].get<int64_t>();
    }
  }
  c.rope = parse_rope(f, source);
  c.layer_sliding_window = parse_sliding_windows(f, c);
  parse_moe(f, c);
  parse_deepseek(config, f, c);
  parse_gemma3(f, source, c);
  return c;
}

// transformers' _compute_yarn_parameters: factor and original_max_position_embeddings required
// (Strata does not derive the factor from max_position_embeddings), beta_fast 32 and beta_slow 1
// by default, attention_factor / mscale / mscale_all_dim optional.
void parse_yarn(const JsonFields& f, RopeConfig& rope) {
  rope.factor = f.get_number("factor");
  check_positive_finite(f, "factor", rope.factor);
  rope.original_max_position_embeddings = f.get_int("original_max_position_embeddings");
  f.check_in("original_max_position_embeddings", rope.original_max_position_embeddings, 1,
             kMaxSize);
  rope.beta_fast = f.opt_number("beta_fast").value_or(32.0);
  rope.beta_slow = f.opt_number("beta_slow").value_or(1.0);
  check_positive_finite(f, "beta_fast", rope.beta_fast);
  check_positive_finite(f, "beta_slow", rope.beta_slow);
  rope.attention_factor = f.opt_number("attention_factor").value_or(0.0);
  if (f.has("attention_factor"))
    check_positive_finite(f, "attention_factor", rope.attention_factor);
  rope.mscale = f.opt_number("mscale").value_or(0.0);
  rope.mscale_all_dim = f.opt_number("mscale_all_dim").value_or(0.0);
  for (const char* key : {"mscale", "mscale_all_dim"}) {
    const double v = f.opt_number(key).value_or(0.0);
    if (!(v >= 0.0) || !std::isfinite(v)) f.fail(f.name(key) + " must be a finite number >= 0");
  }
  rope.truncate = f.opt_bool("truncate").value_or(true);
}

}  // namespace

RopeConfig parse_rope_params(const JsonFields& f, double theta) {
  RopeConfig rope;
  rope.theta = f.opt_number("rope_theta").value_or(theta);
  rope.type = parse_rope_type(f);
  switch (rope.type) {
    case RopeConfig::Type::kDefault:
      break;
    case RopeConfig::Type::kLinear:
      rope.factor = f.get_number("factor");
      check_positive_finite(f, "factor", rope.factor);
      break;
    case RopeConfig::Type::kLlama3:
      rope.factor = f.get_number("factor");
      rope.low_freq_factor = f.get_number("low_freq_factor");
      rope.high_freq_factor = f.get_number("high_freq_factor");
      rope.original_max_position_embeddings = f.get_int("original_max_position_embeddings");
      check_positive_finite(f, "factor", rope.factor);
      check_positive_finite(f, "low_freq_factor", rope.low_freq_factor);
      check_positive_finite(f, "high_freq_factor", rope.high_freq_factor);
      f.check_in("original_max_position_embeddings", rope.original_max_position_embeddings, 1,
                 kMaxSize);
      if (!(rope.high_freq_factor > rope.low_freq_factor)) {
        f.fail(f.name("high_freq_factor") + " must be greater than low_freq_factor");
      }
      break;
    case RopeConfig::Type::kYarn:
      parse_yarn(f, rope);
      break;
  }
  check_positive_finite(f, "rope_theta", rope.theta);
  return rope;
}

std::string_view architecture_name(Architecture arch) {
  for (const ArchInfo& a : kArchitectures) {
    if (a.arch == arch) return a.class_name;
  }
  return "?";
}

ModelConfig parse_model_config_text(std::string_view json_text, std::string_view source_name) {
  const json config = parse_json_object(json_text, source_name, "config");
  try {
    if (std::optional<Gemma3Text> gemma = gemma3_text_config(config, source_name)) {
      ModelConfig c = parse_model_config(gemma->config, source_name);
      if (gemma->multimodal) c.weight_prefix = "language_model.";
      return c;
    }
    return parse_model_config(config, source_name);
  } catch (const json::exception& e) {
    // JsonFields checks types before reading, so this is a safety net, not the normal path.
    throw Error(std::string(source_name) + ": malformed config: " + e.what());
  }
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  // Anything at the path that is not a readable regular file (a directory, a FIFO, a symlink
  // loop) is named by MappedFile, not called missing.
  const std::optional<MappedFile> file = MappedFile::open_if_exists(path);
  if (!file) {
    throw Error("model directory '" + dir.string() + "' has no config.json (looked for '" +
                path.string() + "')");
  }
  return parse_model_config_text(file->text(), path.string());
}

}  // namespace strata::model

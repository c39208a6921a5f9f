#include "plan_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <sstream>
#include <system_error>

#include "core/check.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"
#include "kv/kv_accounting.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_group.h"
#include "kv/kv_layout.h"
#include "kv_cache_options.h"
#include "model/hf_config.h"
#include "model/mla_gpu.h"

namespace strata::cli {
namespace {

using nlohmann::json;

[[noreturn]] void fail(std::string_view source, const std::string& message) {
  throw Error(std::string(source) + ": " + message);
}

int64_t get_int(const json& j, std::string_view source, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) {
    fail(source, std::string("'") + key + "' must be a positive integer");
  }
  return it->get<int64_t>();
}

int64_t opt_int(const json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

int32_t weight_bits_of(const json& j) {
  if (const auto q = j.find("quantization_config"); q != j.end() && q->is_object()) {
    if (q->value("quant_method", "") == "fp8") return 8;
  }
  std::string dtype = j.value("torch_dtype", "");
  if (dtype.empty() && j.contains("dtype") && j["dtype"].is_string()) dtype = j["dtype"];
  return dtype == "float32" ? 32 : 16;
}

// Parameters of the layers' MLP: dense, or routed + shared experts after first_k_dense_replace.
double mlp_params(const json& j, int64_t hidden, int64_t layers) {
  const int64_t inter = opt_int(j, "intermediate_size", 0);
  const int64_t experts = opt_int(j, "n_routed_experts", opt_int(j, "num_experts", 0));
  if (experts == 0) return 3.0 * hidden * inter * layers;
  const int64_t moe_inter = opt_int(j, "moe_intermediate_size", inter);
  const int64_t shared = opt_int(j, "n_shared_experts", 0);
  const int64_t dense_layers = std::min(opt_int(j, "first_k_dense_replace", 0), layers);
  const double moe_layer = 3.0 * hidden * moe_inter * static_cast<double>(experts + shared) +
                           static_cast<double>(hidden) * experts;  // + the router
  return 3.0 * hidden * inter * dense_layers + moe_layer * (layers - dense_layers);
}

// MLA attention projections of one layer (DeepSeek-V2/V3).
double mla_attention_params(const json& j, std::string_view source, int64_t hidden, int64_t heads) {
  const int64_t q_lora = opt_int(j, "q_lora_rank", 0);
  const int64_t nope = get_int(j, source, "qk_nope_head_dim");
  const int64_t rope = get_int(j, source, "qk_rope_head_dim");
  const int64_t v = get_int(j, source, "v_head_dim");
  const int64_t kv_lora = get_int(j, source, "kv_lora_rank");
  const double q = q_lora > 0 ? static_cast<double>(hidden) * q_lora + q_lora +
                                    static_cast<double>(q_lora) * heads * (nope + rope)
                              : static_cast<double>(hidden) * heads * (nope + rope);
  const double kv = static_cast<double>(hidden) * (kv_lora + rope) + kv_lora +
                    static_cast<double>(kv_lora) * heads * (nope + v);
  return q + kv + static_cast<double>(heads) * v * hidden;
}

// The MLP parameters of a model the engine loads: a MoE layer keeps every expert resident (the
// router included), a dense layer (Qwen3-MoE's mlp_only_layers) its intermediate_size MLP.
double engine_mlp_params(const model::ModelConfig& c) {
  double total = 0;
  const auto hidden = static_cast<double>(c.hidden_size);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // DeepSeek: + the shared experts' MLP and V3's router bias (one per expert).
    total += c.moe.is_moe(l)
                 ? (3.0 * hidden * c.moe.moe_intermediate_size + hidden +
                    (c.moe.score_correction_bias ? 1.0 : 0.0)) *
                           static_cast<double>(c.moe.num_experts) +
                       3.0 * hidden * static_cast<double>(c.moe.shared_intermediate_size)
                 : 3.0 * hidden * c.intermediate_size;
  }
  return total;
}

// mlp: the engine's count (engine_mlp_params), or nullopt to estimate it from the JSON.
void estimate_weights(PlanModel& m, const json& j, std::string_view source,
                      std::optional<double> mlp) {
  const int64_t hidden = get_int(j, source, "hidden_size");
  const int64_t vocab = get_int(j, source, "vocab_size");
  const int64_t layers = m.kv.num_layers;
  const bool tied = j.value("tie_word_embeddings", false);
  double attn = 0;
  if (m.kv.is_mla()) {
    attn = mla_attention_params(j, source, hidden, m.num_attention_heads);
  } else {
    const double q = static_cast<double>(m.num_attention_heads) * m.kv.head_dim;
    const double kv = 2.0 * m.kv.num_kv_heads * m.kv.head_dim;
    attn = hidden * (q + kv) + q * hidden;
    if (j.value("attention_bias", false) || m.model_type == "qwen2") attn += q + kv;
  }
  const double params = static_cast<double>(vocab) * hidden * (tied ? 1 : 2) +
                        (attn + 2.0 * hidden) * layers +
                        (mlp ? *mlp : mlp_params(j, hidden, layers)) + hidden;
  m.weight_bytes = static_cast<int64_t>(std::ceil(params * m.weight_bits / 8.0));
}

// Gemma 3's weights as the engine binds them, from its parsed config (a multimodal config keeps
// the sizes under text_config, with transformers' defaults for the rest): four norms a layer and
// the q/k norms beside the projections; the vision tower is not counted.
void count_gemma3_weights(PlanModel& m, const model::ModelConfig& c) {
  const auto hidden = static_cast<double>(c.hidden_size);
  const auto q = static_cast<double>(c.num_attention_heads * c.head_dim);
  const auto kv = static_cast<double>(2 * c.num_key_value_heads * c.head_dim);
  double layer =
      hidden * (q + kv) + q * hidden + 4.0 * hidden + 2.0 * static_cast<double>(c.head_dim);
  if (c.qkv_bias) layer += q + kv + hidden;
  const double embed = static_cast<double>(c.vocab_size) * hidden * (c.tie_word_embeddings ? 1 : 2);
  const double params =
      embed + layer * static_cast<double>(c.num_hidden_layers) + engine_mlp_params(c) + hidden;
  m.weight_bytes = static_cast<int64_t>(std::ceil(params * m.weight_bits / 8.0));
}

// Per-layer windows for architectures the engine does not load: layer_types, else one window
// for every layer unless use_sliding_window is false.
std::vector<int32_t> generic_windows(const json& j, int64_t layers) {
  std::vector<int32_t> w(static_cast<size_t>(layers), 0);
  const auto sw = j.find("sliding_window");
  if (sw == j.end() || !sw->is_number_integer() || !j.value("use_sliding_window", true)) return w;
  const auto window = sw->get<int32_t>();
  const auto types = j.find("layer_types");
  for (size_t i = 0; i < w.size(); ++i) {
    const bool sliding = types == j.end() || !types->is_array() || i >= types->size() ||
                         (*types)[i] == "sliding_attention";
    w[i] = sliding ? window : 0;
  }
  return w;
}

void parse_generic(PlanModel& m, const json& j, std::string_view source) {
  m.kv.num_layers = static_cast<int32_t>(get_int(j, source, "num_hidden_layers"));
  m.num_attention_heads = static_cast<int32_t>(get_int(j, source, "num_attention_heads"));
  m.max_position_embeddings = get_int(j, source, "max_position_embeddings");
  if (j.contains("kv_lora_rank") && !j["kv_lora_rank"].is_null()) {  // MLA
    m.kv.kv_lora_rank = static_cast<int32_t>(get_int(j, source, "kv_lora_rank"));
    m.kv.rope_head_dim = static_cast<int32_t>(get_int(j, source, "qk_rope_head_dim"));
    m.mha_head_dim_k =
        static_cast<int32_t>(get_int(j, source, "qk_nope_head_dim")) + m.kv.rope_head_dim;
    m.mha_head_dim_v = static_cast<int32_t>(get_int(j, source, "v_head_dim"));
  } else {
    m.kv.num_kv_heads =
        static_cast<int32_t>(opt_int(j, "num_key_value_heads", m.num_attention_heads));
    m.kv.head_dim = static_cast<int32_t>(
        opt_int(j, "head_dim", get_int(j, source, "hidden_size") / m.num_attention_heads));
    m.mha_head_dim_k = m.mha_head_dim_v = m.kv.head_dim;
  }
  m.layer_windows = generic_windows(j, m.kv.num_layers);
}

bool engine_architecture(const json& j) {
  const auto a = j.find("architectures");
  if (a == j.end() || !a->is_array() || a->empty() || !(*a)[0].is_string()) return false;
  const std::string name = (*a)[0];
  return name == "LlamaForCausalLM" || name == "MistralForCausalLM" || name == "Qwen2ForCausalLM" ||
         name == "Qwen3ForCausalLM" || name == "MixtralForCausalLM" ||
         name == "Qwen3MoeForCausalLM" || name == "Gemma3ForCausalLM" ||
         name == "Gemma3ForConditionalGeneration" || name == "DeepseekV2ForCausalLM" ||
         name == "DeepseekV3ForCausalLM";
}

}  // namespace

std::optional<int64_t> parse_byte_size(std::string_view text) {
  static constexpr std::pair<std::string_view, double> kSuffixes[] = {{"KiB", 1024.0},
                                                                      {"MiB", 1048576.0},
                                                                      {"GiB", 1073741824.0},
                                                                      {"TiB", 1099511627776.0},
                                                                      {"Ki", 1024.0},
                                                                      {"Mi", 1048576.0},
                                                                      {"Gi", 1073741824.0},
                                                                      {"Ti", 1099511627776.0},
                                                                      {"KB", 1e3},
                                                                      {"MB", 1e6},
                                                                      {"GB", 1e9},
                                                                      {"TB", 1e12},
                                                                      {"K", 1e3},
                                                                      {"M", 1e6},
                                                                      {"G", 1e9},
                                                                      {"T", 1e12},
                                                                      {"B", 1.0}};
  double scale = 1.0;
  for (const auto& [suffix, factor] : kSuffixes) {
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      text.remove_suffix(suffix.size());
      scale = factor;
      break;
    }
  }
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0 || v * scale > 9e18) {
    return std::nullopt;
  }
  return static_cast<int64_t>(std::llround(v * scale));
}

PlanModel parse_plan_model(std::string_view json_text, std::string_view source) {
  const json j = parse_json_file(json_text, source, "config");
  if (!j.is_object()) fail(source, "expected a JSON object");
  PlanModel m;
  m.name = std::string(source);
  m.model_type = j.value("model_type", "");
  m.weight_bits = weight_bits_of(j);
  m.engine_supported = engine_architecture(j);
  std::optional<double> mlp;
  if (m.engine_supported) {
    // What the engine itself will load: its parser decides heads, head_dim and windows.
    const model::ModelConfig c = model::parse_model_config_text(json_text, source);
    m.kv =
        kv::KvShape{static_cast<int32_t>(c.num_hidden_layers),
                    static_cast<int32_t>(c.num_key_value_heads), static_cast<int32_t>(c.head_dim)};
    m.num_attention_heads = static_cast<int32_t>(c.num_attention_heads);
    m.mha_head_dim_k = m.mha_head_dim_v = m.kv.head_dim;
    if (c.mla.enabled()) {  // the latent the engine caches; MHA figures for the expanded K/V
      m.kv = kv::KvShape{.num_layers = static_cast<int32_t>(c.num_hidden_layers),
                         .kv_lora_rank = static_cast<int32_t>(c.mla.kv_lora_rank),
                         .rope_head_dim = static_cast<int32_t>(c.mla.qk_rope_head_dim)};
      m.mha_head_dim_k = static_cast<int32_t>(c.mla.qk_head_dim());
      m.mha_head_dim_v = static_cast<int32_t>(c.mla.v_head_dim);
    }
    m.max_position_embeddings = c.max_position_embeddings;
    m.layer_windows = c.layer_sliding_window;
    mlp = engine_mlp_params(c);
    // As the runner factory refuses it on the GPU: MLA outside the GPU kernels' shapes (a
    // supported one keeps the same latent bytes there, bf16). Gemma 3 runs there without its
    // window group (whole-context K/V in one pool), which the plan for --device cuda already
    // describes.
    m.cpu_only = !model::gpu_mla_refusal(c).empty();
    if (c.architecture == model::Architecture::kGemma3) {
      count_gemma3_weights(m, c);
      return m;
    }
  } else {
    parse_generic(m, j, source);
  }
  estimate_weights(m, j, source, mlp);
  return m;
}

namespace {

// The blocks of a windowed pool one sequence of max_model_len holds between steps.
int64_t window_blocks_held(const PlanReport& r, const PlanGroup& g) {
  return kv::blocks_held_per_sequence(r.max_model_len, g.window, r.settings.block_size);
}

}  // namespace

std::string format_plan_text(const PlanReport& r) {
  std::ostringstream o;
  const kv::KvShape& k = r.model.kv;
  o << "model          " << r.model.name << " (" << r.model.model_type << ", " << k.num_layers
    << " layers, ";
  if (k.is_mla()) {
    o << "MLA: kv_lora_rank " << k.kv_lora_rank << " + rope " << k.rope_head_dim << ")\n";
  } else {
    o << r.model.num_attention_heads << " heads / " << k.num_kv_heads << " KV heads, head_dim "
      << k.head_dim << ")\n";
  }
  o << "kv cache       " << kv_cache_dtype_name(r.settings.kv_dtype);
  if (!r.skipped_layers.empty()) {
    o << " (layers ";
    for (size_t i = 0; i < r.skipped_layers.size(); ++i) o << (i ? "," : "") << r.skipped_layers[i];
    o << " " << kv_cache_dtype_name(device_precision(r.settings.device)) << ")";
  }
  o << ", block size " << r.settings.block_size << " (" << r.block_bytes << " bytes/block)\n";
  o << "kv bytes/token " << kv::format_number(r.kv_bytes_per_token) << " ("
    << kv::format_number(r.kv_bytes_per_token_per_layer) << " per layer, "
    << kv::format_number(r.scale_bytes_per_token) << " of it scales)\n";
  o << "naive MHA      " << kv::format_number(r.naive_mha_bytes_per_token)
    << " bytes/token at 16 bits: "
    << kv::format_number(r.naive_mha_bytes_per_token / r.kv_bytes_per_token) << "x more\n";
  o << "weights        " << kv::format_gib(static_cast<double>(r.model.weight_bytes)) << " ("
    << r.model.weight_bytes << " bytes" << (r.model.weight_bytes_estimated ? ", estimated" : "")
    << ")\n";
  o << "kv pool        " << kv::format_gib(static_cast<double>(r.kv_pool_bytes)) << ": "
    << r.num_blocks << " blocks, " << r.capacity_tokens
    << " tokens (naive MHA: " << r.naive_capacity_tokens << ")\n";
  for (const PlanGroup& g : r.limit_sized_groups) {
    if (g.newest_blocks > 0) {
      o << "int4 residual  ";
    } else {
      o << "windowed pool  ";
    }
    o << kv::format_gib(static_cast<double>(g.bytes)) << ": " << g.num_blocks << " "
      << kv_cache_dtype_name(g.dtype) << " blocks (" << g.bytes << " bytes)";
    if (g.window > 0) {
      o << " for the " << g.num_layers << " layers with a sliding window of " << g.window;
    }
    o << ", taken from the kv pool before its blocks\n";
    if (g.window > 0) {
      const int64_t held = window_blocks_held(r, g);
      o << "window cap     " << held << " blocks (" << held * g.block_bytes << " bytes) of the "
        << g.num_layers << " windowed layers per sequence whatever its length; the kv pool: "
        << r.block_bytes / r.settings.block_size << " bytes per token of context\n";
    }
  }
  o << "max model len  " << r.max_model_len << " (" << r.blocks_per_seq << " blocks/sequence)\n";
  o << "concurrency    " << r.max_concurrent_seqs << " sequences of " << r.max_model_len
    << " tokens\n";
  o << "longest        " << r.longest_context << " tokens in one sequence\n";
  for (const std::string& n : r.notes) o << "note           " << n << "\n";
  return o.str();
}

std::string format_plan_json(const PlanReport& r) {
  json groups = json::array();
  for (const PlanGroup& g : r.limit_sized_groups) {
    groups.push_back({{"kind", g.kind},
                      {"num_layers", g.num_layers},
                      {"window", g.window},
                      {"newest_blocks", g.newest_blocks},
                      {"dtype", kv_cache_dtype_name(g.dtype)},
                      {"num_blocks", g.num_blocks},
                      {"block_bytes", g.block_bytes},
                      {"bytes", g.bytes},
                      {"held_blocks_per_sequence", g.window > 0 ? window_blocks_held(r, g) : 0}});
  }
  json j = {
      {"model", r.model.name},
      {"model_type", r.model.model_type},
      {"attention", r.model.kv.is_mla() ? "mla" : "gqa"},
      {"num_layers", r.model.kv.num_layers},
      {"device", plan_device_name(r.settings.device)},
      {"kv_cache_dtype", kv_cache_dtype_name(r.settings.kv_dtype)},
      {"kv_cache_dtype_skip_layers", r.skipped_layers},
      {"kv_cache_dtype_skip_layers_dtype",
       kv_cache_dtype_name(device_precision(r.settings.device))},
      {"block_size", r.settings.block_size},
      {"block_bytes", r.block_bytes},
      {"kv_bytes_per_token", r.kv_bytes_per_token},
      {"kv_bytes_per_token_per_layer", r.kv_bytes_per_token_per_layer},
      {"scale_bytes_per_token", r.scale_bytes_per_token},
      {"naive_mha_bytes_per_token", r.naive_mha_bytes_per_token},
      {"weight_bytes", r.model.weight_bytes},
      {"weight_bytes_estimated", r.model.weight_bytes_estimated},
      {"kv_pool_bytes", r.kv_pool_bytes},
      {"int4_residual_pool_blocks", r.int4_residual_pool_blocks},
      {"int4_residual_pool_bytes", r.int4_residual_pool_bytes},
      {"int4_residual_pool_dtype", kv_cache_dtype_name(device_precision(r.settings.device))},
      {"limit_sized_groups", groups},
      {"num_blocks", r.num_blocks},
      {"capacity_tokens", r.capacity_tokens},
      {"naive_capacity_tokens", r.naive_capacity_tokens},
      {"max_model_len", r.max_model_len},
      {"sliding_window", r.window},
      {"blocks_per_sequence", r.blocks_per_seq},
      {"max_concurrent_sequences", r.max_concurrent_seqs},
      {"longest_context", r.longest_context},
      {"notes", r.notes},
  };
  return j.dump(2) + "\n";
}

void add_plan_command(CLI::App& app, PlanOptions& o) {
  CLI::App* cmd = app.add_subcommand("plan",
                                     "What fits: KV bytes per token, pool capacity, "
                                     "concurrency and longest context for a model");
  auto* model = cmd->add_option("--model", o.model_dir, "Hugging Face model directory");
  auto* config = cmd->add_option("--config", o.config_file, "A config.json file");
  model->excludes(config);
  cmd->final_callback([&o] {  // neither --model nor --config: the bundled model
    if (o.model_dir.empty() && o.config_file.empty()) o.model_dir = STRATA_DEFAULT_MODEL_DIR;
  });
  cmd->add_option("--kv-cache-dtype", o.kv_cache_dtype,
                  "auto (the weights' dtype), float32, bfloat16 (bf16), float16 (fp16), fp8 "
                  "(= fp8_e4m3), fp8_e5m2, int8, int4");
  cmd->add_option("--kv-cache-dtype-skip-layers", o.kv_cache_dtype_skip_layers,
                  "Layers that keep auto's dtype: sliding_window and/or 0-based indices, "
                  "comma-separated");
  cmd->add_option("--block-size", o.block_size, "KV cache block size in tokens")
      ->check(CLI::IsMember({8, 16, 32, 64, 128}));
  cmd->add_option("--device", o.device,
                  "The engine to plan for: cuda or cpu (int4's residual pool holds bf16 blocks "
                  "on cuda, float32 blocks on cpu)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--gpu-memory", o.gpu_memory, "Device memory, e.g. 80GiB or 141e9 (bytes)");
  auto* util = cmd->add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                               "Share of device memory for weights + KV (default 0.9)")
                   ->check(CLI::Range(0.0, 1.0));
  auto* kv_bytes = cmd->add_option("--kv-cache-memory-bytes", o.kv_cache_memory_bytes,
                                   "KV pool size in bytes (instead of the utilization budget)");
  util->excludes(kv_bytes);
  cmd->add_option("--max-model-len", o.max_model_len, "Longest prompt + output (0 = model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--max-num-seqs", o.max_num_seqs,
                  "int4: most sequences in one step (sizes the residual pool)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                  "int4: most tokens in one step (sizes the residual pool)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--kv-int4-residual", o.kv_int4_residual,
                  "int4: the newest N tokens are read at full precision from the residual pool "
                  "(a positive multiple of --block-size; default one block)");
  cmd->add_flag("--disable-hybrid-kv-cache-manager", o.disable_hybrid_kv_cache_manager,
                "--device cpu: plan a hybrid model's windowed layers at full length in the one "
                "pool, as the engine does with the same flag");
  cmd->add_flag("--json", o.json, "Print the plan as JSON");
}

int run_plan(const PlanOptions& o) {
  namespace fs = std::filesystem;
  if (o.model_dir.empty() == o.config_file.empty())
    throw Error("plan needs --model DIR or --config FILE");
  const fs::path config_path =
      o.config_file.empty() ? fs::path(o.model_dir) / "config.json" : fs::path(o.config_file);
  // MappedFile refuses what is not a regular file (a directory, a FIFO, /dev/zero, a loop).
  const MappedFile config = MappedFile::open(config_path);
  PlanModel model = parse_plan_model(config.text(), config_path.string());
  if (!o.model_dir.empty()) {  // the stored weights, when there are any
    int64_t bytes = 0;
    std::error_code ec;
    for (fs::directory_iterator it(o.model_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      if (p.extension() == ".safetensors" && p.filename() != "reference.safetensors") {
        bytes += static_cast<int64_t>(MappedFile::regular_file_bytes(p));
      }
    }
    if (ec) throw Error("cannot list the model directory '" + o.model_dir + "': " + ec.message());
    if (bytes > 0) {
      model.weight_bytes = bytes;
      model.weight_bytes_estimated = false;
    }
  }
  PlanSettings s;
  s.kv_dtype = parse_kv_cache_dtype_flag(o.kv_cache_dtype);  // auto: compute_plan resolves it
  s.skip_layers = parse_kv_skip_layers_flag(o.kv_cache_dtype_skip_layers);
  s.block_size = o.block_size;
  s.device = o.device == "cpu" ? PlanDevice::kCpu : PlanDevice::kCuda;  // CLI11 checked the name
  const auto gpu = parse_byte_size(o.gpu_memory);
  if (!gpu) throw Error("--gpu-memory '" + o.gpu_memory + "' is not a byte size (e.g. 80GiB)");
  s.gpu_memory_bytes = *gpu;
  s.gpu_memory_utilization = o.gpu_memory_utilization.value_or(0.9);
  if (s.gpu_memory_utilization <= 0) throw Error("--gpu-memory-utilization must be above 0");
  if (!o.kv_cache_memory_bytes.empty()) {
    s.kv_cache_memory_bytes = parse_byte_size(o.kv_cache_memory_bytes);
    if (!s.kv_cache_memory_bytes) {
      throw Error("--kv-cache-memory-bytes '" + o.kv_cache_memory_bytes + "' is not a byte size");
    }
  }
  s.max_model_len = o.max_model_len;
  s.max_num_seqs = o.max_num_seqs;
  s.max_num_batched_tokens = o.max_num_batched_tokens;
  s.kv_int4_residual = o.kv_int4_residual;
  s.disable_hybrid_kv_cache_manager = o.disable_hybrid_kv_cache_manager;
  const PlanReport report = compute_plan(model, s);
  std::fputs((o.json ? format_plan_json(report) : format_plan_text(report)).c_str(), stdout);
  return 0;
}

}  // namespace strata::cli

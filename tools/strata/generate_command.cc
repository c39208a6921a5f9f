#include "generate_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/kv_layout_setup.h"
#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"
#include "model/generation_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using nlohmann::json;

DType parse_weight_dtype(const std::string& name) {
  if (name == "float32" || name == "f32") return DType::kF32;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "float16" || name == "f16") return DType::kF16;
  throw Error("--dummy-dtype '" + name + "' is not supported (use float32, bfloat16 or float16)");
}

// The request's sampling settings: the command line first, then the checkpoint's
// generation_config.json defaults (as vLLM applies them), then the OpenAI defaults.
engine::SamplingParams sampling_params(const GenerateOptions& o, const model::GenerationConfig& g) {
  engine::SamplingParams p;
  p.max_tokens = o.max_tokens;
  p.temperature = o.temperature.value_or(static_cast<float>(g.temperature.value_or(1.0)));
  p.top_p = o.top_p.value_or(static_cast<float>(g.top_p.value_or(1.0)));
  p.top_k = o.top_k.value_or(static_cast<int32_t>(g.top_k.value_or(0)));
  p.min_p = o.min_p.value_or(static_cast<float>(g.min_p.value_or(0.0)));
  p.repetition_penalty =
      o.repetition_penalty.value_or(static_cast<float>(g.repetition_penalty.value_or(1.0)));
  p.presence_penalty = o.presence_penalty;
  p.frequency_penalty = o.frequency_penalty;
  p.seed = o.seed;
  p.stop_token_ids = o.stop_token_ids;
  p.ignore_eos = o.ignore_eos;
  p.logprobs = o.logprobs;
  if (o.echo) p.prompt_logprobs = std::max(o.logprobs, 0);
  return p;
}

std::vector<int32_t> eos_ids(const model::ModelConfig& c, const model::GenerationConfig& g) {
  std::vector<int32_t> ids;
  for (const auto& list : {c.eos_token_ids, g.eos_token_ids}) {
    for (int64_t id : list) {
      const auto id32 = static_cast<int32_t>(id);
      if (std::find(ids.begin(), ids.end(), id32) == ids.end()) ids.push_back(id32);
    }
  }
  return ids;
}

json top_json(const std::vector<std::pair<int32_t, float>>& top) {
  json t = json::object();
  for (const auto& [id, lp] : top) t[std::to_string(id)] = lp;
  return t;
}

// OpenAI completions logprobs, with token ids where the API has token strings: with echo the
// prompt tokens come first and the first prompt token's entries are null.
json logprobs_json(const std::vector<int32_t>& prompt, const engine::GenerationResult& r,
                   bool echo) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array();
  if (echo) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      tokens.push_back(prompt[i]);
      const auto& lp = r.prompt_logprobs[i];
      token_logprobs.push_back(lp ? json(lp->logprob) : json(nullptr));
      top.push_back(lp ? top_json(lp->top_logprobs) : json(nullptr));
    }
  }
  for (const engine::TokenLogprobs& lp : r.output_logprobs) {
    tokens.push_back(lp.token);
    token_logprobs.push_back(lp.logprob);
    top.push_back(top_json(lp.top_logprobs));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
}

std::string kv_dtype_name(const kv::KvSpec& spec) {
  return kv::kv_dtype_summary(spec.dtype, spec.layer_dtypes);
}

double per_second(int64_t n, double seconds) { return seconds > 0 ? n / seconds : 0.0; }

void print_json(const GenerateOptions& o, const model::Model& m, const kv::KvSpec& spec,
                const engine::GenerationResult& r, const engine::GeneratorStats& s,
                const std::optional<std::string>& text) {
  json out = {
      {"model", o.model_dir},
      {"weight_bytes", m.weight_bytes()},
      {"kv_cache_dtype", kv_dtype_name(spec)},
      {"kv_bytes_per_token", std::llround(spec.bytes_per_token(o.block_size))},
      {"kv_residual_blocks", s.num_residual_blocks},
      {"prompt_ids", o.prompt_ids},
      {"output_ids", r.output_ids},
      {"finish_reason", engine::finish_reason_name(r.finish_reason)},
      {"usage",
       {{"prompt_tokens", o.prompt_ids.size()}, {"completion_tokens", r.output_ids.size()}}},
      {"timing",
       {{"prefill_seconds", s.prefill_seconds},
        {"decode_seconds", s.decode_seconds},
        {"prefill_tokens_per_second", per_second(s.num_prefill_tokens, s.prefill_seconds)},
        {"decode_tokens_per_second", per_second(s.num_decode_tokens, s.decode_seconds)}}},
      {"prefix_cache",
       {{"enabled", o.enable_prefix_caching},
        {"cached_prompt_tokens", s.num_cached_prompt_tokens},
        {"cached_blocks", s.prefix_cache.num_cached_blocks}}},
  };
  if (o.logprobs >= 0 || o.echo) out["logprobs"] = logprobs_json(o.prompt_ids, r, o.echo);
  if (text) out["text"] = *text;
  std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

void print_table(const GenerateOptions& o, const model::Model& m, const kv::KvSpec& spec,
                 const engine::GenerationResult& r, const engine::GeneratorStats& s,
                 int32_t block_size) {
  const model::ModelConfig& c = m.config();
  std::printf("model        %s (%s, %lld layers, %lld heads / %lld KV heads, head_dim %lld)\n",
              o.model_dir.c_str(), std::string(model::architecture_name(c.architecture)).c_str(),
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.num_key_value_heads), static_cast<long long>(c.head_dim));
  std::printf(
      "kv cache     %s, block size %d, %d blocks, %lld bytes/token (%lld of them scales)%s\n",
      kv_dtype_name(spec).c_str(), block_size, s.num_blocks,
      static_cast<long long>(std::llround(spec.bytes_per_token(block_size))),
      static_cast<long long>(std::llround(spec.scale_bytes_per_token(block_size))),
      s.num_residual_blocks > 0 ? (" + residual " + std::to_string(s.num_residual_blocks - 1) +
                                   " blocks x " + std::to_string(block_size) + " tokens f32")
                                      .c_str()
                                : "");
  std::printf("prompt       %zu tokens\n", o.prompt_ids.size());
  std::printf("output       %s\n", ids_text(r.output_ids).c_str());
  std::printf("finish       %s after %zu tokens\n", engine::finish_reason_name(r.finish_reason),
              r.output_ids.size());
  std::printf("prefill      %lld tokens in %.3f ms (%.1f tokens/s)\n",
              static_cast<long long>(s.num_prefill_tokens), s.prefill_seconds * 1e3,
              per_second(s.num_prefill_tokens, s.prefill_seconds));
  std::printf("prefix cache %s, %lld prompt tokens hit, %d blocks cached\n",
              o.enable_prefix_caching ? "on" : "off",
              static_cast<long long>(s.num_cached_prompt_tokens), s.prefix_cache.num_cached_blocks);
  std::printf("decode       %lld tokens in %.3f ms (%.1f tokens/s)\n",
              static_cast<long long>(s.num_decode_tokens), s.decode_seconds * 1e3,
              per_second(s.num_decode_tokens, s.decode_seconds));
  for (size_t i = 0; i < r.output_logprobs.size(); ++i) {
    const engine::TokenLogprobs& lp = r.output_logprobs[i];
    std::printf("logprob %3zu  token %d  %.6f\n", i, lp.token, lp.logprob);
  }
}

}  // namespace

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate tokens for one prompt on the CPU");
  cmd->add_option("--model", o.model_dir, "Hugging Face model directory")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
  CLI::Option* ids =
      cmd->add_option("--prompt-ids", o.prompt_ids, "Prompt token ids, comma-separated")
          ->delimiter(',');
  cmd->add_option("--prompt", o.prompt, "Prompt text (needs tokenizer.json in --model)")->excludes(ids);
  cmd->add_option("--max-tokens", o.max_tokens, "Tokens to generate")->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--temperature", o.temperature, "Sampling temperature; 0 = greedy");
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling mass");
  cmd->add_option("--top-k", o.top_k, "Keep the K most likely tokens; 0 or -1 = off");
  cmd->add_option("--min-p", o.min_p, "Drop tokens below min_p x the top probability");
  cmd->add_option("--repetition-penalty", o.repetition_penalty, "Penalty for seen tokens (1 = off)");
  cmd->add_option("--presence-penalty", o.presence_penalty, "OpenAI presence penalty");
  cmd->add_option("--frequency-penalty", o.frequency_penalty, "OpenAI frequency penalty");
  cmd->add_option("--seed", o.seed, "Random seed: same seed, same output");
  cmd->add_option("--stop-token-ids", o.stop_token_ids, "Extra stop token ids")->delimiter(',');
  cmd->add_option("--logprobs", o.logprobs, "Return each token's logprob and K alternatives")
      ->check(CLI::Range(0, 20));
  cmd->add_flag("--echo", o.echo, "Also return the prompt tokens' logprobs (the first is null)");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past the model's EOS token");
  cmd->add_flag("--json", o.json, "Print the result as JSON");
  cmd->add_option("--load-format", o.load_format, "auto (safetensors) or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  cmd->add_option("--dummy-dtype", o.dummy_dtype, "Weight dtype for --load-format dummy");
  cmd->add_option("--block-size", o.block_size, "KV cache block size in tokens")
      ->check(CLI::IsMember({8, 16, 32, 64, 128}));
  cmd->add_option("--threads", o.threads, "Worker threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "Prefill chunk size")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-model-len", o.max_model_len, "Longest prompt + output (0 = model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
                "Reuse the KV of cached prompt prefixes (on by default)");
  add_kv_cache_options(*cmd, o.kv_cache);
}

int run_generate(const GenerateOptions& options) {
  if (options.prompt.empty() && options.prompt_ids.empty()) {
    throw Error("give the prompt with --prompt TEXT or --prompt-ids IDS");
  }
  GenerateOptions o = options;
  const DType kv_dtype = kv_pool_dtype_flag(o.kv_cache.kv_cache_dtype);  // bad values fail first
  const kv::KvSkipLayers skip_layers = parse_kv_skip_layers_flag(o.kv_cache.skip_layers);
  check_kv_int4_residual_flag(o.kv_cache.kv_int4_residual, o.block_size, kv_dtype);
  ThreadPool pool(o.threads);
  model::ModelLoadOptions load;
  load.model_dir = o.model_dir;
  load.load_format = o.load_format == "dummy" ? model::LoadFormat::kDummy : model::LoadFormat::kAuto;
  load.dummy_dtype = parse_weight_dtype(o.dummy_dtype);
  model::Model m = model::Model::load(load);
  const model::GenerationConfig gen_config = model::load_generation_config(o.model_dir);

  std::optional<tokenizer::Tokenizer> tok;
  const std::filesystem::path tokenizer_json = std::filesystem::path(o.model_dir) / "tokenizer.json";
  if (!o.prompt.empty() || std::filesystem::exists(tokenizer_json)) {
    tok = tokenizer::Tokenizer::load(o.model_dir);
  }
  if (!o.prompt.empty()) o.prompt_ids = tok->encode(o.prompt, /*add_special_tokens=*/true);

  engine::GeneratorConfig config;
  config.block_size = o.block_size;
  config.max_num_batched_tokens = o.max_num_batched_tokens;
  config.max_model_len = o.max_model_len;
  config.enable_prefix_caching = o.enable_prefix_caching;
  config.eos_token_ids = eos_ids(m.config(), gen_config);
  config.kv_dtype = kv_dtype;
  config.kv_int4_residual = o.kv_cache.kv_int4_residual;
  const auto kv = engine::resolve_kv_layout(
      engine::KvLayoutOptions{
          .scales = engine::KvScalesOptions{.kv_dtype = kv_dtype,
                                            .calculate_kv_scales = o.kv_cache.calculate_kv_scales,
                                            .allow_unit_kv_scales = o.kv_cache.allow_unit_kv_scales,
                                            .model_dir = o.model_dir},
          .skip_layers = skip_layers,
          .quant_check = o.kv_cache.kv_quant_check,
          .quant_check_threshold = o.kv_cache.kv_quant_check_threshold,
          .full_precision = DType::kF32},
      m, pool);
  if (!kv.ok()) throw Error(kv.status().message());
  if (kv.value().quant_check) {
    std::fputs(engine::format_kv_quant_check(*kv.value().quant_check, DType::kF32).c_str(), stderr);
  }
  config.kv_scales = kv.value().scales;
  config.kv_layer_dtypes = kv.value().spec.layer_dtypes;
  if (Status s = engine::Generator::validate_config(config); !s.ok()) throw Error(s.message());
  engine::Generator generator(m, pool, config);
  const std::vector<engine::GenerationRequest> requests = {
      {o.prompt_ids, sampling_params(o, gen_config)}};
  auto results = generator.generate(requests);
  if (!results.ok()) throw Error(results.status().message());
  const std::optional<std::string> text =
      tok ? std::optional(tok->decode(results->front().output_ids, true)) : std::nullopt;
  if (o.json) {
    print_json(o, m, kv.value().spec, results->front(), generator.stats(), text);
  } else {
    print_table(o, m, kv.value().spec, results->front(), generator.stats(), o.block_size);
    if (text) std::printf("text         %s\n", text->c_str());
  }
  return 0;
}

}  // namespace strata::cli

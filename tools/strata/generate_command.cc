#include "generate_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/kv_layout_setup.h"
#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"
#include "model/generation_config.h"
#include "model/model.h"
#include "strata/engine.h"
#include "token_id_list.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using nlohmann::json;

// What `strata generate` prints, filled by either path (the CPU Generator or the Engine).
struct GenerateReport {
  const char* device = "cpu";
  model::ModelConfig model;
  int64_t weight_bytes = 0;
  std::string kv_cache_dtype;  // kv::kv_dtype_summary: "int8 (layers 0 float32)"
  int64_t kv_bytes_per_token = 0;
  int64_t kv_scale_bytes_per_token = 0;
  int32_t num_blocks = 0;           // the pool, the null block included
  int32_t num_residual_blocks = 0;  // INT4: the residual pool, the null block included; else 0
  engine::GenerationResult result;
  // Prefill runs until the first output token; decode is the rest.
  int64_t num_prefill_tokens = 0;
  int64_t num_decode_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int64_t num_cached_prompt_tokens = 0;
  // Blocks the prefix cache holds at the end; nullopt where the Engine does not say.
  std::optional<int32_t> num_cached_blocks;
  std::optional<std::string> text;  // the output decoded, when the model has a tokenizer
};

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

// ---- the CPU path: engine::Generator over the fp32 model --------------------------------------

engine::ResolvedKvLayout cpu_kv_layout(const EngineConfig& c, model::Model& m, ThreadPool& pool) {
  auto kv = engine::resolve_kv_layout(c, m, pool);
  if (!kv.ok()) throw Error(kv.status().message());
  if (kv.value().quant_check) {
    std::fputs(engine::format_kv_quant_check(*kv.value().quant_check, DType::kF32).c_str(), stderr);
  }
  return std::move(kv).value();
}

GenerateReport run_on_cpu(const GenerateOptions& o, const EngineConfig& c,
                          const model::GenerationConfig& gen_config,
                          const engine::SamplingParams& params) {
  ThreadPool pool(c.num_threads);
  model::Model m = model::Model::load(model::ModelLoadOptions{
      .model_dir = c.model_dir,
      .load_format = c.dummy_weights ? model::LoadFormat::kDummy : model::LoadFormat::kAuto,
      .dummy_dtype = c.dummy_dtype,
  });
  const engine::ResolvedKvLayout kv = cpu_kv_layout(c, m, pool);
  engine::GeneratorConfig config;
  config.block_size = c.block_size;
  config.max_num_batched_tokens = c.max_num_batched_tokens;
  config.max_model_len = c.max_model_len;
  config.enable_prefix_caching = c.enable_prefix_caching;
  config.eos_token_ids = eos_ids(m.config(), gen_config);
  config.kv_dtype = c.kv_dtype;
  config.kv_int4_residual = c.kv_int4_residual;
  config.kv_scales = kv.scales;
  config.kv_layer_dtypes = kv.spec.layer_dtypes;
  if (Status s = engine::Generator::validate_config(config); !s.ok()) throw Error(s.message());
  engine::Generator generator(m, pool, config);
  const std::vector<engine::GenerationRequest> requests = {{o.prompt_ids, params}};
  auto results = generator.generate(requests);
  if (!results.ok()) throw Error(results.status().message());

  const engine::GeneratorStats& s = generator.stats();
  GenerateReport r;
  r.device = device_name(Device::kCpu);
  r.model = m.config();
  r.weight_bytes = m.weight_bytes();
  r.kv_cache_dtype = kv::kv_dtype_summary(kv.spec.dtype, kv.spec.layer_dtypes);
  r.kv_bytes_per_token = std::llround(kv.spec.bytes_per_token(c.block_size));
  r.kv_scale_bytes_per_token = std::llround(kv.spec.scale_bytes_per_token(c.block_size));
  r.num_blocks = s.num_blocks;
  r.num_residual_blocks = s.num_residual_blocks;
  r.result = std::move(results->front());
  r.num_prefill_tokens = s.num_prefill_tokens;
  r.num_decode_tokens = s.num_decode_tokens;
  r.prefill_seconds = s.prefill_seconds;
  r.decode_seconds = s.decode_seconds;
  r.num_cached_prompt_tokens = s.num_cached_prompt_tokens;
  r.num_cached_blocks = s.prefix_cache.num_cached_blocks;
  return r;
}

// ---- the GPU path: one request through the Engine ---------------------------------------------

// Adds one step's output for the request to its result.
void append_output(const RequestOutput& out, engine::GenerationResult& result) {
  if (!out.prompt_logprobs.empty()) result.prompt_logprobs = out.prompt_logprobs;
  for (const CompletionDelta& d : out.deltas) {
    result.output_ids.insert(result.output_ids.end(), d.token_ids.begin(), d.token_ids.end());
    result.output_logprobs.insert(result.output_logprobs.end(), d.logprobs.begin(),
                                  d.logprobs.end());
    if (d.finish_reason) result.finish_reason = *d.finish_reason;
  }
}

GenerateReport run_on_engine(const GenerateOptions& o, EngineConfig c,
                             const engine::SamplingParams& params) {
  c.max_num_seqs = 1;
  Result<std::unique_ptr<Engine>> created = Engine::create(c);
  if (!created.ok()) throw Error(created.status().message());
  Engine& engine = **created;
  EngineRequest request;
  request.prompt = o.prompt_ids;
  request.params = params;
  Result<RequestId> id = engine.submit(std::move(request));
  if (!id.ok()) throw Error(id.status().message());

  GenerateReport r;
  RequestMetrics metrics;
  while (engine.has_unfinished()) {
    Result<std::vector<RequestOutput>> outputs = engine.step();
    if (!outputs.ok()) throw Error(outputs.status().message());
    r.num_prefill_tokens += engine.last_step().num_prefill_tokens;
    r.num_decode_tokens += engine.last_step().num_decode_tokens;
    for (const RequestOutput& out : *outputs) {
      if (out.id != *id) continue;
      append_output(out, r.result);
      metrics = out.metrics;
    }
  }
  r.device = device_name(engine.device());
  r.model = engine.model_config();
  r.weight_bytes = engine.weight_bytes();
  r.kv_cache_dtype = kv::kv_dtype_summary(engine.kv_dtype(), engine.kv_layer_dtypes());
  r.kv_bytes_per_token = engine.kv_bytes_per_token();
  r.kv_scale_bytes_per_token = engine.kv_scale_bytes_per_token();
  r.num_blocks = engine.num_blocks();
  r.num_residual_blocks = engine.num_residual_blocks();
  r.prefill_seconds = metrics.first_token_time - metrics.arrival_time;
  r.decode_seconds = metrics.finished_time - metrics.first_token_time;
  r.num_cached_prompt_tokens = metrics.num_cached_tokens;
  r.num_cached_blocks = engine.last_step().num_cached_blocks;
  return r;
}

// ---- output -----------------------------------------------------------------------------------

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

double per_second(int64_t n, double seconds) { return seconds > 0 ? n / seconds : 0.0; }

void print_json(const GenerateOptions& o, const GenerateReport& r) {
  const engine::GenerationResult& g = r.result;
  json out = {
      {"model", o.model_dir},
      {"device", r.device},
      {"weight_bytes", r.weight_bytes},
      {"kv_cache_dtype", r.kv_cache_dtype},
      {"kv_bytes_per_token", r.kv_bytes_per_token},
      {"kv_residual_blocks", r.num_residual_blocks},
      {"prompt_ids", o.prompt_ids},
      {"output_ids", g.output_ids},
      {"finish_reason", engine::finish_reason_name(g.finish_reason)},
      {"usage",
       {{"prompt_tokens", o.prompt_ids.size()}, {"completion_tokens", g.output_ids.size()}}},
      {"timing",
       {{"prefill_seconds", r.prefill_seconds},
        {"decode_seconds", r.decode_seconds},
        {"prefill_tokens_per_second", per_second(r.num_prefill_tokens, r.prefill_seconds)},
        {"decode_tokens_per_second", per_second(r.num_decode_tokens, r.decode_seconds)}}},
      {"prefix_cache",
       {{"enabled", o.enable_prefix_caching},
        {"cached_prompt_tokens", r.num_cached_prompt_tokens},
        {"cached_blocks", r.num_cached_blocks ? json(*r.num_cached_blocks) : json(nullptr)}}},
  };
  if (o.logprobs >= 0 || o.echo) out["logprobs"] = logprobs_json(o.prompt_ids, g, o.echo);
  if (r.text) out["text"] = *r.text;
  std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

void print_table(const GenerateOptions& o, const GenerateReport& r) {
  const model::ModelConfig& c = r.model;
  const engine::GenerationResult& g = r.result;
  const int32_t block_size = o.block_size;
  std::printf("model        %s (%s, %lld layers, %lld heads / %lld KV heads, head_dim %lld)\n",
              o.model_dir.c_str(), std::string(model::architecture_name(c.architecture)).c_str(),
              static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.num_key_value_heads), static_cast<long long>(c.head_dim));
  const std::string residual = r.num_residual_blocks > 0
                                   ? " + residual " + std::to_string(r.num_residual_blocks - 1) +
                                         " blocks x " + std::to_string(block_size) + " tokens f32"
                                   : "";
  std::printf(
      "kv cache     %s, block size %d, %d blocks, %lld bytes/token (%lld of them scales)%s\n",
      r.kv_cache_dtype.c_str(), block_size, r.num_blocks,
      static_cast<long long>(r.kv_bytes_per_token),
      static_cast<long long>(r.kv_scale_bytes_per_token), residual.c_str());
  std::printf("prompt       %zu tokens\n", o.prompt_ids.size());
  std::printf("output       %s\n", ids_text(g.output_ids).c_str());
  std::printf("finish       %s after %zu tokens\n", engine::finish_reason_name(g.finish_reason),
              g.output_ids.size());
  std::printf("prefill      %lld tokens in %.3f ms (%.1f tokens/s)\n",
              static_cast<long long>(r.num_prefill_tokens), r.prefill_seconds * 1e3,
              per_second(r.num_prefill_tokens, r.prefill_seconds));
  const std::string cached_blocks =
      r.num_cached_blocks ? ", " + std::to_string(*r.num_cached_blocks) + " blocks cached" : "";
  std::printf("prefix cache %s, %lld prompt tokens hit%s\n", o.enable_prefix_caching ? "on" : "off",
              static_cast<long long>(r.num_cached_prompt_tokens), cached_blocks.c_str());
  std::printf("decode       %lld tokens in %.3f ms (%.1f tokens/s)\n",
              static_cast<long long>(r.num_decode_tokens), r.decode_seconds * 1e3,
              per_second(r.num_decode_tokens, r.decode_seconds));
  for (size_t i = 0; i < g.output_logprobs.size(); ++i) {
    const engine::TokenLogprobs& lp = g.output_logprobs[i];
    std::printf("logprob %3zu  token %d  %.6f\n", i, lp.token, lp.logprob);
  }
  if (r.text) std::printf("text         %s\n", r.text->c_str());
}

}  // namespace

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate tokens for one prompt (on the GPU when present, else the CPU)");
  cmd->add_option("--model", o.model_dir, "Hugging Face model directory")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
  CLI::Option* ids =
      cmd->add_option("--prompt-ids", o.prompt_ids_text, "Prompt token ids, comma-separated");
  cmd->add_option("--prompt", o.prompt, "Prompt text (needs tokenizer.json in --model)")
      ->excludes(ids);
  cmd->add_option("--max-tokens", o.max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--temperature", o.temperature, "Sampling temperature; 0 = greedy");
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling mass");
  cmd->add_option("--top-k", o.top_k, "Keep the K most likely tokens; 0 or -1 = off");
  cmd->add_option("--min-p", o.min_p, "Drop tokens below min_p x the top probability");
  cmd->add_option("--repetition-penalty", o.repetition_penalty,
                  "Penalty for seen tokens (1 = off)");
  cmd->add_option("--presence-penalty", o.presence_penalty, "OpenAI presence penalty");
  cmd->add_option("--frequency-penalty", o.frequency_penalty, "OpenAI frequency penalty");
  cmd->add_option("--seed", o.seed, "Random seed: same seed, same output");
  cmd->add_option("--stop-token-ids", o.stop_token_ids_text,
                  "Extra stop token ids, comma-separated");
  cmd->add_option("--logprobs", o.logprobs, "Return each token's logprob and K alternatives")
      ->check(CLI::Range(0, 20));
  cmd->add_flag("--echo", o.echo, "Also return the prompt tokens' logprobs (the first is null)");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past the model's EOS token");
  cmd->add_flag("--json", o.json, "Print the result as JSON");
  add_engine_options(*cmd, o, EngineFlags::kOneRequest);
}

int run_generate(const GenerateOptions& options) {
  GenerateOptions o = options;
  if (o.prompt_ids_text) o.prompt_ids = parse_token_id_list(*o.prompt_ids_text, "--prompt-ids");
  if (o.stop_token_ids_text) {
    o.stop_token_ids = parse_token_id_list(*o.stop_token_ids_text, "--stop-token-ids");
  }
  if (o.prompt.empty() && o.prompt_ids.empty()) {
    throw Error("give the prompt with --prompt TEXT or --prompt-ids IDS");
  }
  const EngineConfig config = engine_config(o);  // bad flag values fail before anything loads
  std::optional<tokenizer::Tokenizer> tok;
  const std::filesystem::path tokenizer_json =
      std::filesystem::path(o.model_dir) / "tokenizer.json";
  if (!o.prompt.empty() || file_exists(tokenizer_json)) {
    tok = tokenizer::Tokenizer::load(o.model_dir);
  }
  if (!o.prompt.empty()) o.prompt_ids = tok->encode(o.prompt, /*add_special_tokens=*/true);
  const model::GenerationConfig gen_config = model::load_generation_config(o.model_dir);
  const engine::SamplingParams params = sampling_params(o, gen_config);

  GenerateReport report = config.device == Device::kCuda
                              ? run_on_engine(o, config, params)
                              : run_on_cpu(o, config, gen_config, params);
  if (tok) report.text = tok->decode(report.result.output_ids, true);
  if (o.json) {
    print_json(o, report);
  } else {
    print_table(o, report);
  }
  return 0;
}

}  // namespace strata::cli

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
#include "engine/kv_quant_check.h"
#include "engine/sequence.h"
#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"
#include "model/generation_config.h"
#include "model/hf_config.h"
#include "strata/engine.h"
#include "structured_output_option.h"
#include "token_id_list.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using nlohmann::json;

// What `strata generate` prints.
struct GenerateReport {
  const char* device = "cpu";
  ModelInfo model;
  std::string kv_cache_dtype;  // kv::kv_dtype_summary: "int8 (layers 0 float32)"
  int64_t kv_bytes_per_token = 0;
  int64_t kv_scale_bytes_per_token = 0;
  int32_t num_blocks = 0;  // group 0's pool, the null block included
  std::vector<KvGroupStats> kv_groups;
  engine::GenerationResult result;
  // Prefill runs until the first output token; decode is the rest.
  int64_t num_prefill_tokens = 0;
  int64_t num_decode_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int64_t num_cached_prompt_tokens = 0;
  int32_t num_cached_blocks = 0;  // blocks the prefix cache holds at the end
  std::optional<std::string> text;  // the output decoded, when the model has a tokenizer
};

// The request's sampling settings: the command line first, then the checkpoint's
// generation_config.json defaults (as vLLM applies them), then the OpenAI defaults.
SamplingParams sampling_params(const GenerateOptions& o, const model::GenerationConfig& g) {
  SamplingParams p;
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
  p.structured = parse_structured_output(o.structured_output);
  return p;
}

// --device cpu: a pool of exactly the blocks the request needs (kv::blocks_needed_per_request
// over prompt + max_tokens, capped at max_model_len: submit refuses a longer request), since no
// other request shares it; no watermark, which would keep a pool that tight from admitting it.
void size_pool_for_the_request(EngineConfig& c, const GenerateOptions& o) {
  const model::ModelConfig mc = model::load_model_config(c.model_dir);
  const int64_t max_len = c.max_model_len > 0 ? c.max_model_len : mc.max_position_embeddings;
  const int64_t total =
      std::min<int64_t>(static_cast<int64_t>(o.prompt_ids.size()) + o.max_tokens, max_len);
  const int64_t blocks = 1 + kv::blocks_needed_per_request(
                                 total, kv::pool_sliding_window(mc.layer_sliding_window),
                                 c.max_num_batched_tokens, c.block_size);
  c.num_blocks = static_cast<int32_t>(std::clamp<int64_t>(blocks, 2, int64_t{1} << 30));
  c.watermark = 0.0;
}

// ---- one request through the Engine -----------------------------------------------------------

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
                             const SamplingParams& params) {
  c.max_num_seqs = 1;
  if (c.device == Device::kCpu) size_pool_for_the_request(c, o);
  Result<std::unique_ptr<Engine>> created = Engine::create(c);
  if (!created.ok()) throw Error(created.status().message());
  Engine& engine = **created;
  if (engine.kv_cache().quant_check) {
    // The kept layers hold the engine's model precision: float32 on the CPU, bf16 on the GPU.
    const DType full = engine.config().device == Device::kCuda ? DType::kBF16 : DType::kF32;
    std::fputs(engine::format_kv_quant_check(*engine.kv_cache().quant_check, full).c_str(), stderr);
  }
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
  r.device = device_name(engine.config().device);
  r.model = engine.model();
  r.kv_cache_dtype = kv::kv_dtype_summary(engine.kv_cache().dtype, engine.kv_cache().layer_dtypes);
  r.kv_bytes_per_token = engine.kv_cache().bytes_per_token;
  r.kv_scale_bytes_per_token = engine.kv_cache().scale_bytes_per_token;
  r.num_blocks = engine.kv_cache().num_blocks;
  r.kv_groups = engine.kv_groups();
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
  for (const TokenLogprobs& lp : r.output_logprobs) {
    tokens.push_back(lp.token);
    token_logprobs.push_back(lp.logprob);
    top.push_back(top_json(lp.top_logprobs));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
}

double per_second(int64_t n, double seconds) { return seconds > 0 ? n / seconds : 0.0; }

// Each KV cache group: its kind, window or R, and its pool's blocks (the null block included)
// and bytes.
json kv_groups_json(const std::vector<KvGroupStats>& groups) {
  json out = json::array();
  for (const KvGroupStats& g : groups) {
    out.push_back({{"kind", g.kind},
                   {"window", g.window},
                   {"newest_blocks", g.newest_blocks},
                   {"num_blocks", g.num_blocks},
                   {"bytes", g.pool_bytes()}});
  }
  return out;
}

void print_json(const GenerateOptions& o, const GenerateReport& r) {
  const engine::GenerationResult& g = r.result;
  json out = {
      {"model", o.model_dir},
      {"device", r.device},
      {"weight_bytes", r.model.weight_bytes},
      {"kv_cache_dtype", r.kv_cache_dtype},
      {"kv_bytes_per_token", r.kv_bytes_per_token},
      {"kv_groups", kv_groups_json(r.kv_groups)},
      {"prompt_ids", o.prompt_ids},
      {"output_ids", g.output_ids},
      {"finish_reason", finish_reason_name(g.finish_reason)},
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
        {"cached_blocks", r.num_cached_blocks}}},
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
  const ModelInfo& c = r.model;
  const engine::GenerationResult& g = r.result;
  const int32_t block_size = o.block_size;
  std::printf("model        %s (%s, %lld layers, %lld heads / %lld KV heads, head_dim %lld)\n",
              o.model_dir.c_str(), c.architecture.c_str(), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_kv_heads),
              static_cast<long long>(c.head_dim));
  std::string residual;
  for (size_t g = 1; g < r.kv_groups.size(); ++g) {
    residual += " + " + r.kv_groups[g].kind + " " + std::to_string(r.kv_groups[g].num_blocks - 1) +
                " blocks x " + std::to_string(block_size) + " tokens";
  }
  std::printf(
      "kv cache     %s, block size %d, %d blocks, %lld bytes/token (%lld of them scales)%s\n",
      r.kv_cache_dtype.c_str(), block_size, r.num_blocks,
      static_cast<long long>(r.kv_bytes_per_token),
      static_cast<long long>(r.kv_scale_bytes_per_token), residual.c_str());
  std::printf("prompt       %zu tokens\n", o.prompt_ids.size());
  std::printf("output       %s\n", ids_text(g.output_ids).c_str());
  std::printf("finish       %s after %zu tokens\n", finish_reason_name(g.finish_reason),
              g.output_ids.size());
  std::printf("prefill      %lld tokens in %.3f ms (%.1f tokens/s)\n",
              static_cast<long long>(r.num_prefill_tokens), r.prefill_seconds * 1e3,
              per_second(r.num_prefill_tokens, r.prefill_seconds));
  std::printf("prefix cache %s, %lld prompt tokens hit, %d blocks cached\n",
              o.enable_prefix_caching ? "on" : "off",
              static_cast<long long>(r.num_cached_prompt_tokens), r.num_cached_blocks);
  std::printf("decode       %lld tokens in %.3f ms (%.1f tokens/s)\n",
              static_cast<long long>(r.num_decode_tokens), r.decode_seconds * 1e3,
              per_second(r.num_decode_tokens, r.decode_seconds));
  for (size_t i = 0; i < g.output_logprobs.size(); ++i) {
    const TokenLogprobs& lp = g.output_logprobs[i];
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
  cmd->add_option("--structured-output", o.structured_output, kStructuredOutputHelp);
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
  const SamplingParams params = sampling_params(o, gen_config);

  GenerateReport report = run_on_engine(o, config, params);
  if (tok) report.text = tok->decode(report.result.output_ids, true);
  if (o.json) {
    print_json(o, report);
  } else {
    print_table(o, report);
  }
  return 0;
}

}  // namespace strata::cli

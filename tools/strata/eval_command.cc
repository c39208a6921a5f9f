#include "eval_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "eval/needle_prompt.h"
#include "eval/needle_report.h"
#include "eval/needle_run.h"
#include "eval/number_list.h"
#include "model/model.h"
#include "strata/engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using nlohmann::json;

constexpr int32_t kMaxContext = 1 << 20;

void print_progress(int64_t done, int64_t total) {
  std::fprintf(stderr, "\rneedle: %lld/%lld prompts", static_cast<long long>(done),
               static_cast<long long>(total));
  if (done == total) std::fprintf(stderr, "\n");
}

json needle_json(const EvalNeedleOptions& o, const EngineConfig& config,
                 const eval::NeedleReport& r, const std::vector<eval::NeedlePrompt>& prompts,
                 const std::vector<eval::NeedleOutcome>& outcomes, const tokenizer::Tokenizer& tok,
                 double seconds, int64_t prompt_tokens) {
  json grid = json::array(), by_context = json::object();
  for (size_t c = 0; c < r.contexts.size(); ++c) {
    json row = json::array();
    for (size_t d = 0; d < r.depths.size(); ++d) row.push_back(r.cell(c, d).accuracy());
    grid.push_back(row);
    by_context[std::to_string(r.contexts[c])] = r.context_total(c).accuracy();
  }
  json items = json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const eval::NeedlePrompt& p = prompts[i];
    items.push_back({{"context", p.context},
                     {"depth", p.depth},
                     {"trial", p.trial},
                     {"key", p.key},
                     {"needle_pos", p.needle_pos},
                     {"prompt_tokens", p.prompt.size()},
                     {"answer_ids", p.answer},
                     {"output_ids", outcomes[i].output_ids},
                     {"output_text", tok.decode(outcomes[i].output_ids, true)},
                     {"correct", outcomes[i].correct}});
  }
  return {{"model", o.model_dir},
          {"task", "passkey"},
          {"seed", o.seed},
          {"trials", o.trials},
          {"contexts", r.contexts},
          {"depths", r.depths},
          {"engine",
           {{"kv_cache_dtype", std::string(kv_cache_dtype_name(config.kv_cache_dtype))},
            {"kv_cache_dtype_skip_layers", kv::kv_skip_layers_text(config.kv_skip_layers)},
            {"block_size", config.block_size},
            {"prefix_caching", config.enable_prefix_caching},
            {"max_num_seqs", config.max_num_seqs},
            {"max_num_batched_tokens", config.max_num_batched_tokens},
            {"kv_eviction_policy",
             kv_eviction_policy_name(config.kv_eviction.policy.value_or(KvEvictionPolicy::kNone))},
            {"kv_budget_tokens", config.kv_eviction.budget_tokens},
            {"kv_sink_tokens", config.kv_eviction.sink_tokens},
            {"kv_window_tokens", config.kv_eviction.window_tokens},
            {"kv_snapkv_selection", o.kv_snapkv_selection},
            {"kv_pooling", o.kv_pooling},
            {"kv_pool_kernel", o.kv_pool_kernel}}},
          {"accuracy", r.accuracy()},
          {"num_correct", r.num_correct},
          {"num_prompts", r.num_prompts},
          {"by_context", by_context},
          {"grid", grid},
          {"seconds", seconds},
          {"prompt_tokens_per_second",
           seconds > 0 ? static_cast<double>(prompt_tokens) / seconds : 0.0},
          {"prompts", items}};
}

int run_needle_eval(const EvalNeedleOptions& o) {
  const KvCacheDType kv_dtype = parse_kv_cache_dtype_flag(o.kv_cache.kv_cache_dtype);
  const KvSkipLayers skip_layers = parse_kv_skip_layers_flag(o.kv_cache.skip_layers);
  check_kv_int4_residual_flag(o.kv_cache.kv_int4_residual, o.block_size, kv_dtype);
  const Result<std::vector<int32_t>> contexts = eval::parse_int_list(o.contexts, 1, kMaxContext);
  if (!contexts.ok()) throw Error("--contexts: " + contexts.status().message());
  const Result<std::vector<double>> depths = eval::parse_number_list(o.depths);
  if (!depths.ok()) throw Error("--depths: " + depths.status().message());
  for (double d : *depths) {
    if (d < 0.0 || d > 1.0) throw Error("--depths: " + std::to_string(d) + " is outside [0, 1]");
  }
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o.model_dir);
  const eval::NeedleFiller filler = eval::NeedleFiller::load(tok, o.model_dir);
  auto prompts = eval::build_needle_prompts(tok, filler, o.seed, *contexts, *depths, o.trials);
  if (!prompts.ok()) throw Error("--contexts: " + prompts.status().message());

  ThreadPool pool(o.threads);
  model::Model m = model::Model::load({o.model_dir});
  int32_t longest = 0;
  for (int32_t c : *contexts) longest = std::max(longest, c);
  if (longest > m.config().max_position_embeddings) {
    throw Error("--contexts: " + std::to_string(longest) + " is beyond the model's " +
                "max_position_embeddings (" + std::to_string(m.config().max_position_embeddings) +
                ")");
  }
  EngineConfig config;
  config.model_dir = o.model_dir;  // the calibration prompt's tokenizer (--calculate-kv-scales)
  config.kv_cache_dtype = kv_dtype;
  config.calculate_kv_scales = o.kv_cache.calculate_kv_scales;
  config.allow_unit_kv_scales = o.kv_cache.allow_unit_kv_scales;
  config.kv_skip_layers = skip_layers;
  config.kv_quant_check = o.kv_cache.kv_quant_check;
  config.kv_quant_check_threshold = o.kv_cache.kv_quant_check_threshold;
  config.kv_quant_check_progress = kv_quant_check_progress();
  config.kv_int4_residual = o.kv_cache.kv_int4_residual;
  config.block_size = o.block_size;
  config.max_num_seqs = o.max_num_seqs;
  config.max_num_batched_tokens = o.max_num_batched_tokens;
  config.enable_prefix_caching = o.enable_prefix_caching;
  if (o.kv_eviction_policy != "none") {
    config.kv_eviction.policy = parse_kv_eviction_policy(o.kv_eviction_policy);
  }
  config.kv_eviction.budget_tokens = o.kv_budget_tokens;
  config.kv_eviction.sink_tokens = o.kv_sink_tokens;
  config.kv_eviction.window_tokens = o.kv_window_tokens;
  set_snapkv_flags(o.kv_snapkv_selection, o.kv_pooling, o.kv_pool_kernel, config.kv_eviction);
  // Enough blocks for max_num_seqs of the longest prompts at once, no more: the CPU is busy with
  // a few sequences, and the engine admits the rest as blocks come back.
  const int64_t blocks_per_seq = (longest + o.block_size - 1) / o.block_size + 1;
  const int64_t seqs = std::min<int64_t>(o.max_num_seqs, static_cast<int64_t>(prompts->size()));
  config.num_blocks = static_cast<int32_t>(seqs * blocks_per_seq + 1);
  auto engine = engine::create_engine(m, pool, config);
  if (!engine.ok()) throw Error(engine.status().message());
  if ((*engine)->kv_cache().quant_check) {
    std::fputs(
        engine::format_kv_quant_check(*(*engine)->kv_cache().quant_check, DType::kF32).c_str(),
        stderr);
  }

  // Opened before the run, so an unwritable path fails at once rather than after it.
  std::ofstream plot;
  if (!o.plot.empty()) {
    plot.open(o.plot, std::ios::binary);
    if (!plot) throw Error(o.plot + ": cannot write the heatmap");
  }
  const auto start = std::chrono::steady_clock::now();
  auto outcomes = eval::run_needle(**engine, *prompts, isatty(2) ? print_progress : nullptr);
  if (!outcomes.ok()) throw Error(outcomes.status().message());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t prompt_tokens = 0;
  for (const auto& p : *prompts) prompt_tokens += static_cast<int64_t>(p.prompt.size());

  const eval::NeedleReport report = eval::summarize_needle(*prompts, *outcomes);
  if (plot.is_open()) {
    const std::filesystem::path dir = std::filesystem::path(o.model_dir).lexically_normal();
    const std::string name = (dir.has_filename() ? dir : dir.parent_path()).filename().string();
    plot << eval::needle_heatmap_svg(report, "Pass-key retrieval, " + name + " (seed " +
                                                 std::to_string(o.seed) + ", " +
                                                 std::to_string(o.trials) + " trials per cell)");
    plot.close();
    if (!plot) throw Error(o.plot + ": cannot write the heatmap");
  }
  if (o.json) {
    std::printf("%s\n",
                needle_json(o, config, report, *prompts, *outcomes, tok, seconds, prompt_tokens)
                    .dump(2, ' ', false, json::error_handler_t::replace)
                    .c_str());
  } else {
    std::printf("needle: pass key (5 digits), greedy, %d trials per cell, seed %llu, %s\n",
                o.trials, static_cast<unsigned long long>(o.seed), o.model_dir.c_str());
    std::printf("accuracy by context (rows, tokens) and needle depth (columns)\n%s",
                eval::format_needle_table(report).c_str());
    std::printf("%lld prompt tokens in %.1f s (%.0f tokens/s)\n",
                static_cast<long long>(prompt_tokens), seconds,
                seconds > 0 ? static_cast<double>(prompt_tokens) / seconds : 0.0);
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, EvalOptions& o) {
  CLI::App* eval = app.add_subcommand("eval", "Quality evaluations run through the engine");
  eval->require_subcommand(1);
  CLI::App* cmd = eval->add_subcommand(
      "needle", "Pass-key retrieval accuracy by context length and needle depth");
  cmd->callback([&o] { o.task = "needle"; });
  add_eval_kv_quant_command(*eval, o.kv_quant, o.task);
  add_eval_kv_eviction_command(*eval, o.kv_eviction, o.task);
  EvalNeedleOptions& n = o.needle;
  cmd->add_option("--model", n.model_dir, "Model directory (with needle_filler.txt)")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
  cmd->add_option("--contexts", n.contexts, "Prompt + answer lengths in tokens")
      ->default_val(n.contexts);
  cmd->add_option("--depths", n.depths, "Needle depths in [0, 1]; 'a,b,...,c' is a progression")
      ->default_val(n.depths);
  cmd->add_option("--trials", n.trials, "Prompts per (context, depth)")
      ->check(CLI::Range(1, 100000))
      ->default_val(n.trials);
  cmd->add_option("--seed", n.seed, "Seed of the prompts: same seed, same prompts")
      ->default_val(n.seed);
  cmd->add_flag("--json", n.json, "Print the result as JSON, every prompt's outcome included");
  cmd->add_option("--plot", n.plot, "Write an SVG heatmap to this file");
  cmd->add_option("--threads", n.threads, "Worker threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--block-size", n.block_size, "KV cache block size in tokens")
      ->check(CLI::IsMember({8, 16, 32, 64, 128}));
  cmd->add_option("--max-num-seqs", n.max_num_seqs, "Sequences in one step")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-num-batched-tokens", n.max_num_batched_tokens, "Tokens in one step")
      ->check(CLI::Range(1, 1 << 24));
  add_kv_cache_options(*cmd, n.kv_cache);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", n.enable_prefix_caching,
                "Reuse the KV of cached prompt prefixes (on by default)");
  cmd->add_option("--kv-eviction-policy", n.kv_eviction_policy,
                  "Token eviction for every prompt: none, streaming_llm, paged_eviction, h2o or "
                  "snapkv")
      ->check(CLI::IsMember({"none", "streaming_llm", "paged_eviction", "h2o", "snapkv"}));
  cmd->add_option("--kv-budget-tokens", n.kv_budget_tokens, "Token eviction: the budget")
      ->check(CLI::Range(0, KvEvictionParams::kMaxTokens));
  cmd->add_option("--kv-sink-tokens", n.kv_sink_tokens, "Token eviction: sink tokens")
      ->check(CLI::Range(0, KvEvictionParams::kMaxTokens));
  cmd->add_option("--kv-window-tokens", n.kv_window_tokens, "Token eviction: window tokens")
      ->check(CLI::Range(0, KvEvictionParams::kMaxTokens));
  cmd->add_option("--kv-snapkv-selection", n.kv_snapkv_selection,
                  "snapkv: per_head (the default) or shared")
      ->check(CLI::IsMember({"per_head", "shared"}));
  cmd->add_option("--kv-pooling", n.kv_pooling, "snapkv: max (the default) or avg pooling")
      ->check(CLI::IsMember({"max", "avg"}));
  cmd->add_option("--kv-pool-kernel", n.kv_pool_kernel, "snapkv: odd pooling kernel (default 7)")
      ->check(CLI::Range(1, KvEvictionParams::kMaxPoolKernel));
}

int run_eval(const EvalOptions& o) {
  if (o.task == "needle") return run_needle_eval(o.needle);
  if (o.task == "kv-quant") return run_eval_kv_quant(o.kv_quant);
  if (o.task == "kv-eviction") return run_eval_kv_eviction(o.kv_eviction);
  throw Error("eval needs a task: needle, kv-quant or kv-eviction");
}

}  // namespace strata::cli

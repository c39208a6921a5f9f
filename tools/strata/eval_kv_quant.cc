#include "eval_kv_quant.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine/kv_layout_setup.h"
#include "eval/needle_prompt.h"
#include "eval/needle_run.h"
#include "eval/number_list.h"
#include "eval_logits_kl.h"
#include "kv/kv_accounting.h"
#include "kv/kv_layer_dtypes.h"
#include "kv_cache_options.h"
#include "model/model.h"
#include "strata/engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using nlohmann::json;

struct DTypeResult {
  std::string name;
  DType dtype = DType::kF32;
  int64_t bytes_per_token = 0;
  std::string scales;
  std::vector<DType> layer_dtypes;  // per-layer exceptions; empty = dtype everywhere
  std::vector<int32_t> kept_layers;
  double mean_kl = 0.0;
  double top1_agreement = 0.0;
  int64_t num_positions = 0;
  double needle_accuracy = 0.0;
  int64_t ref_only = 0;    // reference correct, quantized wrong
  int64_t quant_only = 0;  // quantized correct, reference wrong
};

// The logits at every position of each window, the windows scored together (prompt_logits
// requests) by an engine whose pool holds all of them; layers in kept_layers at float32.
std::vector<std::vector<float>> logits_with(model::Model& m, ThreadPool& pool,
                                            const EvalKvQuantOptions& o, DType dtype,
                                            const std::vector<int32_t>& kept_layers,
                                            const std::vector<std::vector<int32_t>>& windows) {
  EngineConfig c;
  c.model_dir = o.model_dir;  // the FP8 scales' calibration text, as the caller resolved them
  c.kv_cache_dtype = *kv::kv_cache_dtype_of(dtype);
  c.kv_skip_layers.layers = kept_layers;  // resolved once by the caller, check included
  c.calculate_kv_scales = o.calculate_kv_scales;
  c.allow_unit_kv_scales = o.allow_unit_kv_scales;
  c.block_size = o.block_size;
  if (dtype == DType::kI4) c.kv_int4_residual = o.kv_int4_residual;
  c.enable_prefix_caching = false;
  c.max_num_seqs = static_cast<int32_t>(windows.size());
  c.watermark = 0.0;
  int64_t blocks = 1;
  for (const std::vector<int32_t>& w : windows) {
    blocks += kv::blocks_needed_per_request(
        static_cast<int64_t>(w.size()) + 1, kv::pool_sliding_window(m.config().layer_sliding_window),
        c.max_num_batched_tokens, c.block_size);
  }
  c.num_blocks = static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
  auto created = engine::create_engine(m, pool, c);
  if (!created.ok()) throw Error(created.status().message());
  Engine& engine = **created;
  std::vector<RequestId> ids;
  for (const std::vector<int32_t>& w : windows) {
    EngineRequest r;
    r.prompt = w;
    r.params.temperature = 0.0f;
    r.params.max_tokens = 1;
    r.params.ignore_eos = true;
    r.prompt_logits = true;
    auto id = engine.submit(std::move(r));
    if (!id.ok()) throw Error(id.status().message());
    ids.push_back(*id);
  }
  std::vector<std::vector<float>> logits(windows.size());
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    if (!outputs.ok()) throw Error(outputs.status().message());
    for (RequestOutput& out : *outputs) {
      if (out.prompt_logits.empty()) continue;
      const auto at = std::find(ids.begin(), ids.end(), out.id) - ids.begin();
      logits[static_cast<size_t>(at)] = std::move(out.prompt_logits);
    }
  }
  return logits;
}

std::vector<eval::NeedleOutcome> needle_with(model::Model& m, ThreadPool& pool,
                                             const EvalKvQuantOptions& o, DType dtype,
                                             const std::vector<int32_t>& kept_layers,
                                             const std::vector<eval::NeedlePrompt>& prompts,
                                             int32_t longest) {
  EngineConfig c;
  c.model_dir = o.model_dir;
  c.kv_cache_dtype = *kv::kv_cache_dtype_of(dtype);
  c.kv_skip_layers.layers = kept_layers;  // resolved once by the caller, check included
  c.calculate_kv_scales = o.calculate_kv_scales;
  c.allow_unit_kv_scales = o.allow_unit_kv_scales;
  c.block_size = o.block_size;
  if (dtype == DType::kI4) c.kv_int4_residual = o.kv_int4_residual;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = std::max(4096, longest);
  const int64_t blocks_per_seq = (longest + o.block_size - 1) / o.block_size + 1;
  c.num_blocks = static_cast<int32_t>(o.max_num_seqs * blocks_per_seq + 1);
  auto engine = engine::create_engine(m, pool, c);
  if (!engine.ok()) throw Error(engine.status().message());
  auto outcomes = eval::run_needle(**engine, prompts);
  if (!outcomes.ok()) throw Error(outcomes.status().message());
  return std::move(outcomes).value();
}

}  // namespace

void add_eval_kv_quant_command(CLI::App& eval, EvalKvQuantOptions& o, std::string& task) {
  CLI::App* cmd = eval.add_subcommand(
      "kv-quant", "Quantized KV cache vs float32: mean KL, top-1 agreement, paired needle accuracy");
  cmd->callback([&task] { task = "kv-quant"; });
  cmd->add_option("--model", o.model_dir, "Model directory (tokenizer.json; needle_filler.txt)")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
  cmd->add_option("--kv-cache-dtype", o.kv_cache_dtypes,
                  "Comma-separated KV dtypes to compare with float32 (fp8, fp8_e5m2, int8, ...)")
      ->default_val(o.kv_cache_dtypes);
  cmd->add_flag("--calculate-kv-scales,!--no-calculate-kv-scales", o.calculate_kv_scales,
                "fp8: compute scales at start-up (on by default here)");
  cmd->add_flag("--allow-unit-kv-scales", o.allow_unit_kv_scales,
                "fp8: scale 1.0 when there is no other source");
  cmd->add_option("--kv-cache-dtype-skip-layers", o.skip_layers,
                  "Layers kept at float32 for every dtype: sliding_window and/or 0-based indices");
  cmd->add_flag("--kv-quant-check", o.kv_quant_check,
                "Per dtype, measure each layer's error at start-up and keep the layers above "
                "the threshold at float32");
  cmd->add_option("--kv-quant-check-threshold", o.kv_quant_check_threshold,
                  "--kv-quant-check: keep a layer whose output KL (nats per token, that layer "
                  "alone quantized) is above this")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--kv-int4-residual", o.kv_int4_residual,
                  "int4: the newest N tokens are read at full precision (a positive multiple of "
                  "--block-size; default one block)");
  add_quality_eval_options(*cmd, o);
}

int run_eval_kv_quant(const EvalKvQuantOptions& o) {
  std::vector<DTypeResult> results;
  {
    std::stringstream list(o.kv_cache_dtypes);
    std::string name;
    while (std::getline(list, name, ',')) {
      DTypeResult r;
      r.name = name;
      // One-line error for a bad value, before any work; auto is the CPU's float32.
      const KvCacheDType asked = parse_kv_cache_dtype_flag(name);
      r.dtype = kv::resolve_kv_cache_dtype(asked, DType::kF32);
      if (r.dtype == DType::kI4)
        check_kv_int4_residual_flag(o.kv_int4_residual, o.block_size, asked);
      results.push_back(r);
    }
    if (results.empty()) throw Error("--kv-cache-dtype: give at least one dtype");
  }
  const KvSkipLayers skip_layers = parse_kv_skip_layers_flag(o.skip_layers);
  const Result<std::vector<int32_t>> contexts = eval::parse_int_list(o.needle_contexts, 1, 1 << 20);
  if (!contexts.ok()) throw Error("--needle-contexts: " + contexts.status().message());
  const Result<std::vector<double>> depths = eval::parse_number_list(o.needle_depths);
  if (!depths.ok()) throw Error("--needle-depths: " + depths.status().message());

  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o.model_dir);
  const std::vector<std::vector<int32_t>> windows =
      text_windows(tok, o.model_dir, o.text, o.num_windows, o.window_len);
  ThreadPool pool(o.threads);
  model::Model m = model::Model::load({o.model_dir});
  const int64_t vocab = m.vocab_size();

  const std::vector<std::vector<float>> ref =
      logits_with(m, pool, o, DType::kF32, {}, windows);
  std::vector<eval::NeedlePrompt> prompts;
  std::vector<eval::NeedleOutcome> ref_needle;
  int32_t longest = 0;
  if (o.needle_trials > 0) {
    const eval::NeedleFiller filler = eval::NeedleFiller::load(tok, o.model_dir);
    auto built = eval::build_needle_prompts(tok, filler, o.seed, *contexts, *depths,
                                            o.needle_trials);
    if (!built.ok()) throw Error("--needle-contexts: " + built.status().message());
    prompts = std::move(built).value();
    for (const int32_t c : *contexts) longest = std::max(longest, c);
    ref_needle = needle_with(m, pool, o, DType::kF32, {}, prompts, longest);
  }
  int64_t ref_correct = 0;
  for (const auto& x : ref_needle) ref_correct += x.correct ? 1 : 0;

  for (DTypeResult& r : results) {
    const auto kv = engine::resolve_kv_layout(
        engine::KvLayoutOptions{
            .scales = engine::KvScalesOptions{.kv_dtype = r.dtype,
                                              .calculate_kv_scales = o.calculate_kv_scales,
                                              .allow_unit_kv_scales = o.allow_unit_kv_scales,
                                              .model_dir = o.model_dir},
            .skip_layers = skip_layers,
            .quant_check = o.kv_quant_check,
            .quant_check_threshold = o.kv_quant_check_threshold,
            .full_precision = DType::kF32,
            .quant_check_progress = kv_quant_check_progress()},
        m, pool);
    if (!kv.ok()) throw Error(kv.status().message());
    if (kv.value().quant_check) {
      std::fputs(engine::format_kv_quant_check(*kv.value().quant_check, DType::kF32).c_str(),
                 stderr);
    }
    r.scales = kv.value().scales_source.empty() ? "none (not fp8)" : kv.value().scales_source;
    r.layer_dtypes = kv.value().spec.layer_dtypes;
    for (size_t l = 0; l < r.layer_dtypes.size(); ++l) {
      if (r.layer_dtypes[l] != r.dtype) r.kept_layers.push_back(static_cast<int32_t>(l));
    }
    r.bytes_per_token = std::llround(kv.value().spec.bytes_per_token(o.block_size));
    const LogitsComparison c =
        compare_logits(ref, logits_with(m, pool, o, r.dtype, r.kept_layers, windows), vocab);
    r.mean_kl = c.mean_kl;
    r.top1_agreement = c.top1_agreement;
    r.num_positions = c.num_positions;
    if (!prompts.empty()) {
      const std::vector<eval::NeedleOutcome> q =
          needle_with(m, pool, o, r.dtype, r.kept_layers, prompts, longest);
      int64_t correct = 0;
      for (size_t i = 0; i < q.size(); ++i) {
        correct += q[i].correct ? 1 : 0;
        r.ref_only += ref_needle[i].correct && !q[i].correct ? 1 : 0;
        r.quant_only += !ref_needle[i].correct && q[i].correct ? 1 : 0;
      }
      r.needle_accuracy = static_cast<double>(correct) / static_cast<double>(q.size());
    }
  }

  const double ref_acc =
      prompts.empty() ? 0.0 : static_cast<double>(ref_correct) / static_cast<double>(prompts.size());
  const int64_t ref_bytes = m.kv_spec(DType::kF32).bytes_per_token();
  if (o.json) {
    json rows = json::array();
    for (const DTypeResult& r : results) {
      rows.push_back({{"kv_cache_dtype", r.name},
                      {"kv_bytes_per_token", r.bytes_per_token},
                      {"float32_layers", r.kept_layers},
                      {"fp8_scales", r.scales},
                      {"mean_kl", r.mean_kl},
                      {"top1_agreement", r.top1_agreement},
                      {"positions", r.num_positions},
                      {"needle_accuracy", r.needle_accuracy},
                      {"discordant_reference_only", r.ref_only},
                      {"discordant_quantized_only", r.quant_only}});
    }
    const json out = {{"model", o.model_dir},
                      {"reference", {{"kv_cache_dtype", "float32"},
                                     {"kv_bytes_per_token", ref_bytes},
                                     {"needle_accuracy", ref_acc}}},
                      {"block_size", o.block_size},
                      {"needle_prompts", prompts.size()},
                      {"seed", o.seed},
                      {"results", rows}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("kv-quant: %s, %d windows x %d tokens (KL, top-1), %zu needle prompts, block %d\n",
              o.model_dir.c_str(), o.num_windows, o.window_len, prompts.size(), o.block_size);
  int width = 10;  // the dtype column: wide enough for "int8 (layers 0,5 float32)"
  for (const DTypeResult& r : results) {
    width = std::max(width, static_cast<int>(kv::kv_dtype_summary(r.dtype, r.layer_dtypes).size()));
  }
  std::printf("%-*s %12s %12s %10s %10s %18s\n", width, "dtype", "bytes/token", "mean KL", "top-1",
              "needle", "discordant ref/q");
  std::printf("%-*s %12lld %12s %10s %9.1f%% %18s\n", width, "float32",
              static_cast<long long>(ref_bytes), "-", "-", 100 * ref_acc, "-");
  for (const DTypeResult& r : results) {
    const std::string name = kv::kv_dtype_summary(r.dtype, r.layer_dtypes);
    std::printf("%-*s %12lld %12.3e %9.2f%% %9.1f%% %11lld/%lld\n", width, name.c_str(),
                static_cast<long long>(r.bytes_per_token), r.mean_kl, 100 * r.top1_agreement,
                100 * r.needle_accuracy, static_cast<long long>(r.ref_only),
                static_cast<long long>(r.quant_only));
  }
  return 0;
}

}  // namespace strata::cli

#include "eval_kv_eviction.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "eval/needle_prompt.h"
#include "eval/needle_run.h"
#include "eval/number_list.h"
#include "eval_logits_kl.h"
#include "model/model.h"
#include "strata/engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using nlohmann::json;

// The windows' logits at every position, and the most blocks each window's sequence held after a
// step (RequestMetrics::max_held_blocks), from one engine whose pool holds every window whole.
struct WindowsRun {
  std::vector<std::vector<float>> logits;
  double mean_max_held_blocks = 0.0;
  // Token-level policies: what the same evictions would hold without compaction (else 0).
  double mean_blocks_without_compaction = 0.0;
};

EngineConfig config_for(const EvalKvEvictionOptions& o, const KvEvictionParams& eviction,
                        int32_t num_seqs, int32_t longest) {
  EngineConfig c;
  c.block_size = o.block_size;
  c.kv_eviction = eviction;
  c.max_num_seqs = num_seqs;
  c.max_num_batched_tokens = std::max(4096, longest);
  c.watermark = 0.0;
  const int64_t blocks_per_seq = (longest + o.block_size - 1) / o.block_size + 1;
  c.num_blocks = static_cast<int32_t>(num_seqs * blocks_per_seq + 1);
  return c;
}

WindowsRun run_windows(model::Model& m, ThreadPool& pool, const EvalKvEvictionOptions& o,
                       const KvEvictionParams& eviction,
                       const std::vector<std::vector<int32_t>>& windows) {
  EngineConfig c = config_for(o, eviction, static_cast<int32_t>(windows.size()), o.window_len);
  c.enable_prefix_caching = false;
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
    r.kv_eviction = eviction;  // selection_at_tokens is the request's only
    auto id = engine.submit(std::move(r));
    if (!id.ok()) throw Error(id.status().message());
    ids.push_back(*id);
  }
  WindowsRun run;
  run.logits.resize(windows.size());
  int64_t held = 0, uncompacted = 0;
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    if (!outputs.ok()) throw Error(outputs.status().message());
    for (RequestOutput& out : *outputs) {
      const auto at = std::find(ids.begin(), ids.end(), out.id) - ids.begin();
      if (!out.prompt_logits.empty())
        run.logits[static_cast<size_t>(at)] = std::move(out.prompt_logits);
      if (out.finished) {
        held += out.metrics.max_held_blocks;
        uncompacted += out.metrics.max_blocks_without_compaction;
      }
    }
  }
  run.mean_max_held_blocks = static_cast<double>(held) / static_cast<double>(windows.size());
  run.mean_blocks_without_compaction =
      static_cast<double>(uncompacted) / static_cast<double>(windows.size());
  return run;
}

// Needle prompts of one context, every one under `eviction`.
std::vector<eval::NeedleOutcome> run_needle_prompts(model::Model& m, ThreadPool& pool,
                                                    const EvalKvEvictionOptions& o,
                                                    const KvEvictionParams& eviction,
                                                    const std::vector<eval::NeedlePrompt>& prompts,
                                                    int32_t context) {
  const EngineConfig c = config_for(o, eviction, o.max_num_seqs, context);
  auto engine = engine::create_engine(m, pool, c);
  if (!engine.ok()) throw Error(engine.status().message());
  auto outcomes = eval::run_needle(**engine, prompts);
  if (!outcomes.ok()) throw Error(outcomes.status().message());
  return std::move(outcomes).value();
}

// The windows split into a prompt and a continuation: the budget a share of the prompt, SnapKV
// selecting once after it (KvEvictionParams::selection_at_tokens), the others evicting as in
// the whole window; KL and top-1 at the rows after each continuation token (each computed
// through the evicted cache).
struct ContinuationMeasure {
  bool measured = false;
  int32_t budget_tokens = 0;  // of the prompt
  LogitsComparison kl;
  double mean_max_held_blocks = 0.0;
  double mean_blocks_without_compaction = 0.0;
};

struct Row {
  KvEvictionPolicy policy = KvEvictionPolicy::kNone;
  std::optional<KvEvictionSelection> selection;  // SnapKV's
  double share = 1.0;
  int32_t budget_tokens = 0;  // of a text window
  // False for SnapKV: it evicts once the prompt is computed, so a teacher-forced window (a
  // prompt) is the full cache's; the continuation measure and its needle prompts measure it.
  bool windows_measured = true;
  LogitsComparison kl;
  double mean_max_held_blocks = 0.0;
  double mean_blocks_without_compaction = 0.0;
  ContinuationMeasure continuation;
  int64_t needle_correct = 0;
  int64_t ref_only = 0;    // the full cache right, eviction wrong
  int64_t evict_only = 0;  // eviction right, the full cache wrong
};

KvEvictionParams params_of(const EvalKvEvictionOptions& o, const Row& row, int32_t budget) {
  KvEvictionParams p{row.policy, budget, o.sink_tokens, o.window_tokens};
  if (row.policy == KvEvictionPolicy::kSnapKv) {
    p.selection = row.selection;
    if (!o.pooling.empty()) p.pooling = parse_kv_eviction_pooling(o.pooling);
    p.pool_kernel = o.pool_kernel;
  }
  return p;
}

// "snapkv/per_head", or the policy's name.
std::string row_name(const Row& r) {
  std::string name = kv_eviction_policy_name(r.policy);
  if (r.selection) name += std::string("/") + kv_eviction_selection_name(*r.selection);
  return name;
}

int32_t budget_of(double share, int32_t tokens) {
  return std::max(1, static_cast<int32_t>(std::lround(share * tokens)));
}

// "-" or the KL, top-1 and held blocks (token-level: with compaction / the same evictions
// without it) of one measure.
struct Cells {
  char kl[32] = "-", top1[32] = "-", held[32] = "-";
  Cells(bool measured, const LogitsComparison& kl_of, KvEvictionPolicy policy, double held_blocks,
        double without) {
    if (!measured) return;
    std::snprintf(kl, sizeof(kl), "%.3e", kl_of.mean_kl);
    std::snprintf(top1, sizeof(top1), "%.2f%%", 100 * kl_of.top1_agreement);
    if (is_token_level(policy)) {
      std::snprintf(held, sizeof(held), "%.1f/%.1f", held_blocks, without);
    } else {
      std::snprintf(held, sizeof(held), "%.1f", held_blocks);
    }
  }
};

void print_table(const EvalKvEvictionOptions& o, int32_t prompt_len, const std::vector<Row>& rows,
                 double ref_held, int64_t ref_correct, int64_t num_prompts) {
  std::printf(
      "kv-eviction: %s, %d windows x %d tokens (KL, top-1; continuation: the last %d after a "
      "%d-token prompt), %lld needle prompts, block %d\n",
      o.model_dir.c_str(), o.num_windows, o.window_len, o.window_len - prompt_len, prompt_len,
      static_cast<long long>(num_prompts), o.block_size);
  std::printf("%-15s %7s %8s %11s %8s %12s %8s %11s %8s %12s %8s %18s\n", "policy", "budget",
              "tokens", "mean KL", "top-1", "held blocks", "c.tokens", "cont. KL", "c.top-1",
              "c.held", "needle", "discordant ref/ev");
  const double pct = num_prompts > 0 ? 100.0 / static_cast<double>(num_prompts) : 0.0;
  std::printf("%-15s %6.1f%% %8d %11s %8s %12.1f %8d %11s %8s %12s %7.1f%% %18s\n", "full cache",
              100.0, o.window_len, "-", "-", ref_held, prompt_len, "-", "-", "-",
              pct * static_cast<double>(ref_correct), "-");
  for (const Row& r : rows) {
    const Cells whole(r.windows_measured, r.kl, r.policy, r.mean_max_held_blocks,
                      r.mean_blocks_without_compaction);
    const ContinuationMeasure& c = r.continuation;
    const Cells cont(c.measured, c.kl, r.policy, c.mean_max_held_blocks,
                     c.mean_blocks_without_compaction);
    std::printf("%-15s %6.1f%% %8d %11s %8s %12s %8d %11s %8s %12s %7.1f%% %11lld/%lld\n",
                row_name(r).c_str(), 100 * r.share, r.budget_tokens, whole.kl, whole.top1,
                whole.held, c.budget_tokens, cont.kl, cont.top1, cont.held,
                pct * static_cast<double>(r.needle_correct), static_cast<long long>(r.ref_only),
                static_cast<long long>(r.evict_only));
  }
  if (std::any_of(rows.begin(), rows.end(),
                  [](const Row& r) { return is_token_level(r.policy); })) {
    std::printf("h2o held blocks: with compaction / the same evictions without it\n");
  }
  if (std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.windows_measured; })) {
    std::printf(
        "snapkv evicts once its prompt is computed: no whole-window measure; its continuation "
        "measure selects after the window's prompt\n");
  }
}

}  // namespace

void add_eval_kv_eviction_command(CLI::App& eval, EvalKvEvictionOptions& o, std::string& task) {
  CLI::App* cmd = eval.add_subcommand(
      "kv-eviction",
      "Token eviction vs the full cache: mean KL, top-1 agreement, blocks held, paired needle "
      "accuracy, per policy and budget");
  cmd->callback([&task] { task = "kv-eviction"; });
  cmd->add_option("--model", o.model_dir, "Model directory (tokenizer.json; needle_filler.txt)")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
  cmd->add_option("--policies", o.policies,
                  "Comma-separated: streaming_llm, paged_eviction, h2o, snapkv")
      ->default_val(o.policies);
  cmd->add_option("--budgets", o.budgets,
                  "Comma-separated budgets as shares of the window / needle context, in (0, 1]")
      ->default_val(o.budgets);
  cmd->add_option("--kv-sink-tokens", o.sink_tokens, "Sink tokens (default: the policy's)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--kv-window-tokens", o.window_tokens, "Window tokens (default: the policy's)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--snapkv-selections", o.snapkv_selections,
                  "SnapKV: comma-separated selections, each a row: per_head (each layer and KV "
                  "head keeps its own tokens), shared (one set for all)")
      ->default_val(o.snapkv_selections);
  cmd->add_option("--kv-pooling", o.pooling, "SnapKV: max or avg pooling (default: max)")
      ->check(CLI::IsMember({"max", "avg"}));
  cmd->add_option("--kv-pool-kernel", o.pool_kernel, "SnapKV: odd pooling kernel (default: 7)")
      ->check(CLI::Range(1, KvEvictionParams::kMaxPoolKernel));
  cmd->add_option("--continuation-len", o.continuation_len,
                  "Tokens at each window's end measured as a continuation of the rest (its "
                  "prompt; budgets are shares of it): -1 = window-len / 8, 0 = none")
      ->check(CLI::Range(-1, 1 << 20))
      ->default_val(o.continuation_len);
  cmd->add_flag("--continuation-only", o.continuation_only,
                "Measure the continuation only, not every position of the whole window");
  add_quality_eval_options(*cmd, o);
}

int run_eval_kv_eviction(const EvalKvEvictionOptions& o) {
  std::vector<KvEvictionPolicy> policies;
  {
    std::stringstream list(o.policies);
    std::string name;
    while (std::getline(list, name, ',')) {
      const std::optional<KvEvictionPolicy> p = parse_kv_eviction_policy(name);
      if (!p || *p == KvEvictionPolicy::kNone) {
        throw Error("--policies: '" + name +
                    "' is not streaming_llm, paged_eviction, h2o or snapkv");
      }
      policies.push_back(*p);
    }
    if (policies.empty()) throw Error("--policies: give at least one policy");
  }
  std::vector<KvEvictionSelection> selections;
  {
    std::stringstream list(o.snapkv_selections);
    std::string name;
    while (std::getline(list, name, ',')) {
      const std::optional<KvEvictionSelection> s = parse_kv_eviction_selection(name);
      if (!s) throw Error("--snapkv-selections: '" + name + "' is not per_head or shared");
      selections.push_back(*s);
    }
    if (selections.empty()) throw Error("--snapkv-selections: give at least one selection");
  }
  if (o.pool_kernel != -1 && o.pool_kernel % 2 == 0) throw Error("--kv-pool-kernel: must be odd");
  // Each (policy, SnapKV selection) to measure.
  std::vector<Row> variants;
  for (const KvEvictionPolicy policy : policies) {
    Row v;
    v.policy = policy;
    if (policy != KvEvictionPolicy::kSnapKv) {
      variants.push_back(v);
      continue;
    }
    for (const KvEvictionSelection s : selections) {
      v.selection = s;
      variants.push_back(v);
    }
  }
  const Result<std::vector<double>> shares = eval::parse_number_list(o.budgets);
  if (!shares.ok()) throw Error("--budgets: " + shares.status().message());
  for (const double s : *shares) {
    if (!(s > 0.0 && s <= 1.0))
      throw Error("--budgets: " + std::to_string(s) + " is not in (0, 1]");
  }
  const Result<std::vector<int32_t>> contexts = eval::parse_int_list(o.needle_contexts, 1, 1 << 20);
  if (!contexts.ok()) throw Error("--needle-contexts: " + contexts.status().message());
  const Result<std::vector<double>> depths = eval::parse_number_list(o.needle_depths);
  if (!depths.ok()) throw Error("--needle-depths: " + depths.status().message());

  const int32_t continuation_len = o.continuation_len >= 0 ? o.continuation_len : o.window_len / 8;
  if (continuation_len >= o.window_len) {
    throw Error("--continuation-len: must be below --window-len (" + std::to_string(o.window_len) +
                ")");
  }
  if (o.continuation_only && continuation_len == 0) {
    throw Error("--continuation-only: needs a continuation (--continuation-len > 0)");
  }
  const int32_t prompt_len = o.window_len - continuation_len;
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o.model_dir);
  const std::vector<std::vector<int32_t>> windows =
      text_windows(tok, o.model_dir, o.text, o.num_windows, o.window_len);
  ThreadPool pool(o.threads);
  model::Model m = model::Model::load({o.model_dir});
  const int64_t vocab = m.vocab_size();

  // Progress on stderr, a line per stage: the reference, then each (policy, budget).
  const auto start = std::chrono::steady_clock::now();
  const size_t num_stages = 1 + variants.size() * shares->size();
  size_t stage = 0;
  const auto done = [&](const std::string& what) {
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "kv-eviction: %zu/%zu %s done, %.0f s\n", ++stage, num_stages,
                 what.c_str(), elapsed.count());
  };
  const KvEvictionParams none{KvEvictionPolicy::kNone};  // the full cache
  const WindowsRun ref = run_windows(m, pool, o, none, windows);
  // Needle prompts grouped by context (each context's budget is its own share).
  std::vector<std::vector<eval::NeedlePrompt>> by_context;
  std::vector<std::vector<eval::NeedleOutcome>> ref_needle;
  int64_t num_prompts = 0, ref_correct = 0;
  if (o.needle_trials > 0) {
    const eval::NeedleFiller filler = eval::NeedleFiller::load(tok, o.model_dir);
    for (const int32_t c : *contexts) {
      auto built = eval::build_needle_prompts(tok, filler, o.seed, {c}, *depths, o.needle_trials);
      if (!built.ok()) throw Error("--needle-contexts: " + built.status().message());
      by_context.push_back(std::move(built).value());
      ref_needle.push_back(run_needle_prompts(m, pool, o, none, by_context.back(), c));
      for (const auto& x : ref_needle.back()) ref_correct += x.correct ? 1 : 0;
      num_prompts += static_cast<int64_t>(by_context.back().size());
    }
  }
  done("full cache");

  std::vector<Row> rows;
  for (const Row& variant : variants) {
    const KvEvictionPolicy policy = variant.policy;
    for (const double share : *shares) {
      Row r = variant;
      r.share = share;
      r.budget_tokens = budget_of(share, o.window_len);
      r.windows_measured = policy != KvEvictionPolicy::kSnapKv && !o.continuation_only;
      if (r.windows_measured) {
        const WindowsRun run = run_windows(m, pool, o, params_of(o, r, r.budget_tokens), windows);
        r.kl = compare_logits(ref.logits, run.logits, vocab);
        r.mean_max_held_blocks = run.mean_max_held_blocks;
        r.mean_blocks_without_compaction = run.mean_blocks_without_compaction;
      }
      if (continuation_len > 0) {
        ContinuationMeasure& c = r.continuation;
        c.measured = true;
        c.budget_tokens = budget_of(share, prompt_len);
        KvEvictionParams p = params_of(o, r, c.budget_tokens);
        if (policy == KvEvictionPolicy::kSnapKv) p.selection_at_tokens = prompt_len;
        const WindowsRun run = run_windows(m, pool, o, p, windows);
        // Row i scores token i + 1: the rows after each continuation token.
        c.kl = compare_logits(ref.logits, run.logits, vocab, prompt_len);
        c.mean_max_held_blocks = run.mean_max_held_blocks;
        c.mean_blocks_without_compaction = run.mean_blocks_without_compaction;
      }
      for (size_t c = 0; c < by_context.size(); ++c) {
        const int32_t context = (*contexts)[c];
        const std::vector<eval::NeedleOutcome> q = run_needle_prompts(
            m, pool, o, params_of(o, r, budget_of(share, context)), by_context[c], context);
        for (size_t i = 0; i < q.size(); ++i) {
          r.needle_correct += q[i].correct ? 1 : 0;
          r.ref_only += ref_needle[c][i].correct && !q[i].correct ? 1 : 0;
          r.evict_only += !ref_needle[c][i].correct && q[i].correct ? 1 : 0;
        }
      }
      rows.push_back(r);
      char what[64];
      std::snprintf(what, sizeof(what), "%s at %.1f %%", row_name(r).c_str(), 100 * share);
      done(what);
    }
  }

  if (!o.json) {
    print_table(o, prompt_len, rows, ref.mean_max_held_blocks, ref_correct, num_prompts);
    return 0;
  }
  const auto accuracy = [&](int64_t correct) {
    return num_prompts > 0 ? static_cast<double>(correct) / static_cast<double>(num_prompts) : 0.0;
  };
  json out_rows = json::array();
  for (const Row& r : rows) {
    const auto measured = [&](double x) { return r.windows_measured ? json(x) : json(nullptr); };
    const ContinuationMeasure& c = r.continuation;
    const json continuation =
        c.measured ? json{{"prompt_tokens", prompt_len},
                          {"budget_tokens", c.budget_tokens},
                          {"mean_kl", c.kl.mean_kl},
                          {"top1_agreement", c.kl.top1_agreement},
                          {"positions", c.kl.num_positions},
                          {"mean_max_held_blocks", c.mean_max_held_blocks},
                          {"mean_max_blocks_without_compaction",
                           is_token_level(r.policy) ? json(c.mean_blocks_without_compaction)
                                                    : json(nullptr)}}
                   : json(nullptr);
    out_rows.push_back(
        {{"policy", kv_eviction_policy_name(r.policy)},
         {"selection",
          r.selection ? json(kv_eviction_selection_name(*r.selection)) : json(nullptr)},
         {"budget_share", r.share},
         {"budget_tokens", r.budget_tokens},
         {"mean_kl", measured(r.kl.mean_kl)},
         {"top1_agreement", measured(r.kl.top1_agreement)},
         {"positions", r.kl.num_positions},
         {"mean_max_held_blocks", measured(r.mean_max_held_blocks)},
         {"mean_max_blocks_without_compaction",
          is_token_level(r.policy) ? measured(r.mean_blocks_without_compaction) : json(nullptr)},
         {"needle_accuracy", accuracy(r.needle_correct)},
         {"discordant_reference_only", r.ref_only},
         {"discordant_eviction_only", r.evict_only},
         {"continuation", continuation}});
  }
  const json out = {{"model", o.model_dir},
                    {"block_size", o.block_size},
                    {"windows", o.num_windows},
                    {"window_len", o.window_len},
                    {"needle_contexts", *contexts},
                    {"needle_prompts", num_prompts},
                    {"seed", o.seed},
                    {"reference",
                     {{"mean_max_held_blocks", ref.mean_max_held_blocks},
                      {"needle_accuracy", accuracy(ref_correct)}}},
                    {"results", out_rows}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace strata::cli

#include "bench_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/driver.h"
#include "bench/http_engine.h"
#include "bench/progress.h"
#include "bench/report.h"
#include "bench/synthetic_workloads.h"
#include "bench/trace.h"
#include "structured_output_option.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine_summary.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "strata/engine.h"

namespace strata::cli {
namespace {

// strata::Engine behind the driver's interface. One request = one sequence (n = 1).
class EngineAdapter final : public bench::BenchEngine {
 public:
  EngineAdapter(Engine& engine, float temperature, StructuredOutput structured)
      : engine_(engine), temperature_(temperature), structured_(std::move(structured)) {}

  Result<uint64_t> submit(const bench::SubmitRequest& r) override {
    EngineRequest req;
    req.prompt.assign(r.prompt.begin(), r.prompt.end());
    req.params.max_tokens = r.max_tokens;
    req.params.ignore_eos = r.ignore_eos;
    req.params.temperature = temperature_;
    req.params.seed = r.seed;
    req.params.structured = structured_;
    req.priority = r.priority;
    Result<RequestId> id = engine_.submit(std::move(req));
    if (!id.ok()) return id.status();
    return static_cast<uint64_t>(*id);
  }

  Status step(std::vector<bench::TokenEvent>& events, bench::StepRecord& s) override {
    Result<std::vector<RequestOutput>> outputs = engine_.step();
    if (!outputs.ok()) return outputs.status();
    for (RequestOutput& o : *outputs) {
      bench::TokenEvent e;
      e.id = o.id;
      e.finished = o.finished;
      e.cancelled = o.cancelled;
      for (CompletionDelta& d : o.deltas) {
        e.new_tokens.insert(e.new_tokens.end(), d.token_ids.begin(), d.token_ids.end());
      }
      events.push_back(std::move(e));
    }
    static_cast<EngineStepStats&>(s) = engine_.last_step();
    return Status::Ok();
  }

  bool has_unfinished() const override { return engine_.has_unfinished(); }

  EngineTotals counters() const override { return engine_.totals(); }

 private:
  Engine& engine_;
  float temperature_;
  StructuredOutput structured_;
};



// Requests per second: "inf" = offline. Unset: offline for synthetic workloads, the trace's
// timestamps for traces.
double parse_request_rate(const std::string& text) {
  if (text.empty() || text == "inf") return std::numeric_limits<double>::infinity();
  size_t used = 0;
  double r = 0;
  try {
    r = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(r > 0) || !std::isfinite(r)) {
    throw Error("--request-rate '" + text + "': give requests per second (> 0) or inf");
  }
  return r;
}

bench::Workload make_workload(const BenchOptions& o, const bench::WorkloadLimits& limits) {
  using bench::parse_length_range;
  const int64_t num_prompts = o.num_prompts > 0 ? o.num_prompts : 100;
  if (!o.trace.empty()) {
    const bench::TraceBuildConfig c{.hash_block_size = o.trace_hash_block_size,
                                    .block_size = o.trace_block_size,
                                    .output_scale = o.trace_output_scale,
                                    .time_scale = o.trace_time_scale,
                                    .max_requests = o.num_prompts,
                                    .think_s = o.think_time_ms / 1e3};
    return bench::build_trace_workload(bench::load_trace(o.trace), c, limits);
  }
  if (o.workload == "random") {
    return bench::make_random_workload(
        {.num_prompts = num_prompts,
         .input_len = parse_length_range(o.input_len, "--input-len"),
         .output_len = parse_length_range(o.output_len, "--output-len"),
         .prefix_len = o.prefix_len},
        limits);
  }
  if (o.workload == "sharegpt-like") {
    return bench::make_sharegpt_workload({.num_prompts = num_prompts,
                                          .input = {o.input_median, o.input_sigma},
                                          .output = {o.output_median, o.output_sigma},
                                          .length_scale = o.length_scale},
                                         limits);
  }
  if (o.workload == "agentic") {
    return bench::make_agentic_workload(
        {.num_sessions = o.num_sessions,
         .turns = parse_length_range(o.turns, "--turns"),
         .system_prompt_len = o.system_prompt_len,
         .turn_input_len = parse_length_range(o.turn_input_len, "--turn-input-len"),
         .turn_output_len = parse_length_range(o.turn_output_len, "--turn-output-len"),
         .length_scale = o.length_scale,
         .think_s = o.think_time_ms / 1e3},
        limits);
  }
  throw Error("unknown workload '" + o.workload +
              "' (use random, sharegpt-like, agentic or --trace)");
}

EngineConfig bench_engine_config(const BenchOptions& o) {
  EngineConfig c = engine_config(o);
  c.policy =
      o.scheduling_policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  c.max_batch_size = o.max_batch_size;
  c.batch_timeout_ms = o.batch_timeout_ms;
  return c;
}

bench::ReportHeader report_header(const BenchOptions& o, const bench::Workload& w, double rate,
                                  int64_t max_model_len) {
  bench::ReportHeader h;
  h.model = o.model_dir;
  h.workload = w.name;
  h.workload_description = w.description;
  h.num_requests = static_cast<int64_t>(w.requests.size());
  h.num_sessions = w.num_sessions;
  h.request_rate = rate;
  h.trace_timestamps = !o.trace.empty() && w.has_arrival_times && o.request_rate.empty();
  h.seed = o.seed;
  h.ignore_eos = o.ignore_eos;
  h.temperature = o.temperature;
  h.block_size = o.block_size;
  h.num_blocks = o.num_blocks;
  h.kv_cache_memory_bytes = o.kv_cache_memory_bytes;
  h.max_num_seqs = o.max_num_seqs;
  h.max_num_batched_tokens = o.max_num_batched_tokens;
  h.max_model_len = max_model_len;
  h.enable_prefix_caching = o.enable_prefix_caching;
  h.preemption_mode = o.preemption_mode;
  h.scheduling_policy = o.scheduling_policy;
  h.max_batch_size = o.max_batch_size;
  h.batch_timeout_ms = o.batch_timeout_ms;
  h.num_threads = o.threads;
  return h;
}

// The workload replayed through one engine (in-process or over HTTP), its metrics.
bench::BenchMetrics replay(bench::BenchEngine& engine, const bench::Workload& w,
                           const BenchOptions& o, const std::string& scheduler,
                           const std::string& allocator, double kv_bytes_per_token) {
  bench::SteadyClock clock;
  bench::ProgressBar bar(stderr, isatty(fileno(stderr)) != 0, scheduler + "/" + allocator);
  bench::Progress last;
  bench::DriverOptions d;
  d.ignore_eos = o.ignore_eos;
  d.seed = o.seed;
  d.block_size = o.block_size;
  d.stall_timeout_s = std::max(60.0, 2 * o.batch_timeout_ms / 1e3 + 10);
  d.on_progress = [&](const bench::Progress& p) {
    last = p;
    bar.update(p);
  };
  const bench::RunResult result = bench::run_workload(w, engine, clock, d);
  bar.finish(last);
  bench::BenchMetrics metrics = bench::compute_metrics(
      result,
      {.block_size = o.block_size, .kv_bytes_per_token = kv_bytes_per_token, .slo = o.goodput_slo});
  metrics.scheduler = scheduler;
  metrics.allocator = allocator;
  return metrics;
}

// One run: a fresh engine over the loaded model, the workload replayed, its metrics.
bench::BenchMetrics run_one(model::Model* m, ThreadPool& pool, EngineConfig config,
                            const bench::Workload& w, const BenchOptions& o,
                            const std::string& scheduler, const std::string& allocator) {
  config.scheduler = scheduler == "static" ? SchedulerKind::kStatic : SchedulerKind::kContinuous;
  config.allocator =
      allocator == "contiguous" ? KvAllocatorKind::kContiguous : KvAllocatorKind::kPaged;
  // The CPU borrows the loaded model; the GPU loads its own copy of the weights into each engine.
  Result<std::unique_ptr<Engine>> engine =
      m != nullptr ? engine::create_engine(*m, pool, config) : Engine::create(config);
  if (!engine.ok()) throw Error(engine.status().message());
  print_pool(**engine);
  StructuredOutput structured = parse_structured_output(o.structured_output);
  if (structured.active()) {
    if (const Status s = (*engine)->compile_structured_output(structured); !s.ok()) {
      throw Error("--structured-output: " + s.message());
    }
  }
  EngineAdapter adapter(**engine, o.temperature, std::move(structured));
  return replay(adapter, w, o, scheduler, allocator,
                static_cast<double>((*engine)->kv_cache().bytes_per_token));
}

// `strata bench --endpoint URL...`: the workload through running servers, round-robin. The model
// directory gives only the vocabulary the workload draws token ids from (it should be the served
// model); the servers' max_model_len bounds the lengths.
int run_http(const BenchOptions& o, double rate) {
  bench::HttpBenchConfig http;
  http.endpoints = o.endpoints;
  http.api_key = o.api_key;
  http.temperature = o.temperature;
  Result<std::unique_ptr<bench::HttpBenchEngine>> engine =
      bench::HttpBenchEngine::connect(std::move(http));
  if (!engine.ok()) throw Error(engine.status().message());
  const bench::ServerInfo& server = (*engine)->server();
  const model::ModelConfig config = model::load_model_config(o.model_dir);
  const int64_t max_model_len = o.max_model_len > 0   ? o.max_model_len
                                : server.max_model_len > 0 ? server.max_model_len
                                                           : config.max_position_embeddings;
  const bench::WorkloadLimits limits{
      .vocab_size = config.vocab_size, .max_model_len = max_model_len, .seed = o.seed};
  bench::Workload w = make_workload(o, limits);
  if (o.trace.empty() || !o.request_rate.empty()) bench::assign_poisson_arrivals(w, rate, o.seed);
  bench::validate_workload(w, max_model_len, config.vocab_size);
  std::string where, endpoints;
  for (const std::string& e : o.endpoints) {
    const std::string_view host = std::string_view(e).substr(e.rfind("http://", 0) == 0 ? 7 : 0);
    where += (where.empty() ? "" : ",") + std::string(host);
    endpoints += (endpoints.empty() ? "" : ",") + e;
  }
  const bench::BenchMetrics run = replay(**engine, w, o, "http", where,
                                         static_cast<double>(server.kv_bytes_per_token));
  bench::ReportHeader header = report_header(o, w, rate, max_model_len);
  header.model = server.model;
  header.endpoint = endpoints;
  const std::vector<bench::BenchMetrics> runs = {run};
  const std::string out =
      o.json ? bench::report_json(header, runs) : bench::report_table(header, runs);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (o.json) std::fputc('\n', stdout);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, BenchOptions& o) {
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark the engine on a workload or a trace");
  // model
#ifdef STRATA_DEFAULT_MODEL_DIR
  cmd->add_option("--model", o.model_dir, "Hugging Face model directory")
      ->default_val(std::string(STRATA_DEFAULT_MODEL_DIR));
#else
  cmd->add_option("--model", o.model_dir, "Hugging Face model directory")->required();
#endif
  add_engine_options(*cmd, o);
  cmd->add_option("--seed", o.seed, "Seed of the workload, the arrivals and the sampling");
  // workload
  CLI::Option* workload =
      cmd->add_option("--workload", o.workload, "random (default), sharegpt-like or agentic");
  cmd->add_option("--trace", o.trace, "Replay a JSONL trace (Mooncake format included)")
      ->excludes(workload);
  cmd->add_option("--num-prompts", o.num_prompts,
                  "Requests (default 100; a trace: its first N lines)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--input-len", o.input_len, "random: prompt tokens, N or A:B");
  cmd->add_option("--output-len", o.output_len, "random: output tokens, N or A:B");
  cmd->add_option("--prefix-len", o.prefix_len, "random: a prefix shared by every prompt")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--input-median", o.input_median, "sharegpt-like: median prompt tokens");
  cmd->add_option("--input-sigma", o.input_sigma, "sharegpt-like: log-normal sigma of the prompt");
  cmd->add_option("--output-median", o.output_median, "sharegpt-like: median output tokens");
  cmd->add_option("--output-sigma", o.output_sigma,
                  "sharegpt-like: log-normal sigma of the output");
  cmd->add_option("--length-scale", o.length_scale, "sharegpt-like, agentic: scale every length");
  cmd->add_option("--num-sessions", o.num_sessions, "agentic: sessions")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--turns", o.turns, "agentic: turns per session, N or A:B");
  cmd->add_option("--system-prompt-len", o.system_prompt_len, "agentic: shared system/tool prefix")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--turn-input-len", o.turn_input_len, "agentic: new tokens per turn, N or A:B");
  cmd->add_option("--turn-output-len", o.turn_output_len, "agentic: output tokens per turn");
  cmd->add_option("--think-time-ms", o.think_time_ms, "Pause between a session's turns");
  cmd->add_option("--trace-block-size", o.trace_block_size,
                  "trace: tokens built per hash id (scales lengths by this / 512)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--trace-hash-block-size", o.trace_hash_block_size,
                  "trace: tokens per hash id in the trace")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--trace-output-scale", o.trace_output_scale, "trace: scale output lengths");
  cmd->add_option("--trace-time-scale", o.trace_time_scale, "trace: scale arrival times");
  cmd->add_option("--request-rate", o.request_rate,
                  "Poisson arrivals per second, or inf (offline; default, traces: timestamps)");
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", o.ignore_eos,
                "Generate exactly the asked output lengths (default)");
  cmd->add_option("--temperature", o.temperature, "Sampling temperature (0 = greedy)");
  cmd->add_option("--structured-output", o.structured_output, kStructuredOutputHelp);
  // scheduling (the engine flags came with add_engine_options)
  cmd->add_option("--scheduling-policy", o.scheduling_policy, "fcfs or priority")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  cmd->add_option("--scheduler", o.schedulers, "continuous and/or static, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"continuous", "static"}));
  cmd->add_option("--allocator", o.allocators, "paged and/or contiguous, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"paged", "contiguous"}));
  cmd->add_option("--batch-timeout-ms", o.batch_timeout_ms, "static: wait this long for a batch")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--max-batch-size", o.max_batch_size, "static: requests per batch")
      ->check(CLI::Range(1, 1 << 20));
  // HTTP backend
  cmd->add_option("--endpoint", o.endpoints,
                  "Benchmark a running `strata serve` at http://HOST:PORT (streams /v1/completions) "
                  "instead of an in-process engine; --model then only gives the vocabulary. "
                  "Several (repeated or comma-separated): instances of one model, requests "
                  "round-robin")
      ->delimiter(',');
  cmd->add_option("--api-key", o.api_key, "--endpoint: the server's bearer key");
  // Parsed as it is read, so a bad threshold stops the bench before the model loads.
  cmd->add_option_function<std::vector<std::string>>(
         "--goodput",
         [&o](const std::vector<std::string>& items) {
           Result<bench::Slo> slo = bench::parse_goodput(items);
           if (!slo.ok()) throw Error(slo.status().message());
           o.goodput_slo = *slo;
         },
         "Also report goodput: requests/s meeting every threshold given, in ms: ttft:MS, "
         "tpot:MS, e2el:MS (end-to-end), e.g. --goodput ttft:500 tpot:50")
      ->type_name("KEY:MS");
  cmd->add_flag("--json", o.json, "Print the report as JSON");
}

int run_bench(const BenchOptions& o) {
  const double rate = parse_request_rate(o.request_rate);
  if (!o.endpoints.empty() && !o.structured_output.empty()) {
    throw Error("--structured-output is for the local engine, not --endpoint");
  }
  if (!o.endpoints.empty()) return run_http(o, rate);
  if (o.role != "both") {
    throw Error("--role is for strata serve: benchmark a decode instance with --endpoint "
                "(tools/bench/bench_disaggregation.sh)");
  }
  ThreadPool pool(o.threads);
  model::ModelLoadOptions load;
  load.model_dir = o.model_dir;
  load.load_format =
      o.load_format == "dummy" ? model::LoadFormat::kDummy : model::LoadFormat::kAuto;
  load.dummy_dtype = parse_weight_dtype(o.dummy_dtype);
  load.weight_residency =
      o.mmap_weights ? model::WeightResidency::kMapped : model::WeightResidency::kAnonymous;
  const EngineConfig config = bench_engine_config(o);
  // On the CPU the model is loaded once and every run borrows it; on the GPU each engine loads
  // its own (dummy weights are generated on the device in about a second).
  std::optional<model::Model> m;
  if (config.device == Device::kCpu) m.emplace(model::Model::load(load));
  const model::ModelConfig mc = m ? m->config() : model::load_model_config(o.model_dir);
  const int64_t max_model_len = o.max_model_len > 0 ? o.max_model_len : mc.max_position_embeddings;
  const bench::WorkloadLimits limits{
      .vocab_size = mc.vocab_size, .max_model_len = max_model_len, .seed = o.seed};
  bench::Workload w = make_workload(o, limits);
  // A trace keeps its timestamps unless a rate is given; synthetic workloads default to offline.
  if (o.trace.empty() || !o.request_rate.empty()) bench::assign_poisson_arrivals(w, rate, o.seed);
  bench::validate_workload(w, max_model_len, mc.vocab_size);

  std::vector<bench::BenchMetrics> runs;
  for (const std::string& scheduler : o.schedulers) {
    for (const std::string& allocator : o.allocators) {
      runs.push_back(run_one(m ? &*m : nullptr, pool, config, w, o, scheduler, allocator));
    }
  }
  const bench::ReportHeader header = report_header(o, w, rate, max_model_len);
  const std::string out =
      o.json ? bench::report_json(header, runs) : bench::report_table(header, runs);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (o.json) std::fputc('\n', stdout);
  return 0;
}

}  // namespace strata::cli
